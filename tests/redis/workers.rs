//! Two workers (two `RedisLimiter`s, two connections) on one server share one identity's
//! buckets: together they never get more than the buckets allow.

use tollgate_testkit::redis_server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_server::RedisServer;
use tollgate::redis::RedisLimiter;
use tollgate::{Decision, Key, Profile};

const PROFILE: &str = "name: w\nidentities: { capacity: 64 }\nstore: { timeout: 5s }\n\
    route_classes:\n  w:\n    burst: { tokens: 5, per: 100ms }\n    sustained: { tokens: 50, per: 1s }\n  \
    s:\n    burst: { tokens: 5, per: 1m }\n    sustained: { tokens: 50, per: 1h }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_never_admit_more_than_the_buckets_allow() {
    let server = RedisServer::start();
    // Neither worker is given a secret: the first creates it in Redis, the second reads it.
    let a = Arc::new(
        RedisLimiter::connect(&server.url(), Profile::from_yaml(PROFILE).unwrap())
            .await
            .unwrap(),
    );
    let b = Arc::new(
        RedisLimiter::connect(&server.url(), Profile::from_yaml(PROFILE).unwrap())
            .await
            .unwrap(),
    );
    let w = a.route_class("w").unwrap();

    // Their digests agree: what one spends, the other cannot (a slow class, so that no token
    // comes back during these round trips however loaded the machine).
    let s = a.route_class("s").unwrap();
    let key = Key::authenticated("acme", "shared", s).unwrap();
    for _ in 0..5 {
        assert_eq!(a.admit(&key).await, Decision::Admit);
    }
    assert!(matches!(b.admit(&key).await, Decision::Throttle { .. }));

    let admitted = Arc::new(AtomicU64::new(0));
    let first = Arc::new(AtomicU64::new(u64::MAX));
    let last = Arc::new(AtomicU64::new(0));
    let stop = tokio::time::Instant::now() + Duration::from_millis(700);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let limiter = if i % 2 == 0 { a.clone() } else { b.clone() };
        let (admitted, first, last) = (admitted.clone(), first.clone(), last.clone());
        tasks.push(tokio::spawn(async move {
            let mut decisions = 0u64;
            while tokio::time::Instant::now() < stop {
                let key = Key::authenticated("acme", "hammer", w).unwrap();
                let (v, now) = limiter.evaluate_traced(&key).await;
                let now = now.expect("the server answered");
                if v.decision == Decision::Admit {
                    admitted.fetch_add(1, Ordering::Relaxed);
                    first.fetch_min(now, Ordering::Relaxed);
                    last.fetch_max(now, Ordering::Relaxed);
                }
                decisions += 1;
            }
            decisions
        }));
    }
    let mut decisions = 0;
    for t in tasks {
        decisions += t.await.unwrap();
    }
    let admitted = admitted.load(Ordering::Relaxed);
    let elapsed_us = last.load(Ordering::Relaxed) - first.load(Ordering::Relaxed);
    // For every bucket and interval: admissions <= tokens + floor(elapsed * tokens / per).
    let burst = 5 + elapsed_us * 5 / 100_000;
    let sustained = 50 + elapsed_us * 50 / 1_000_000;
    let bound = burst.min(sustained);
    assert!(
        admitted <= bound,
        "{admitted} admitted in {elapsed_us}us; bound {bound}"
    );
    // ...and the hammering got close to it (the workers did not starve each other).
    assert!(admitted * 10 >= bound * 7, "{admitted} of {bound}");
    assert!(decisions > admitted * 2, "{decisions} decisions");
}
