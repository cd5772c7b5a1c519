//! A primary, a replica and three Sentinels: decisions through the Sentinels' primary, and a
//! forced failover (`SENTINEL FAILOVER`) under load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::redis::RedisLimiter;
use tollgate::{Decision, Key};
use tollgate_testkit::redis_sentinel::RedisSentinel;

use crate::load;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_go_to_the_primary_the_sentinels_name() {
    let sentinel = RedisSentinel::start();
    let limiter = RedisLimiter::builder(&sentinel.url(), load::profile())
        .key_secret(b"test")
        .connect()
        .await
        .unwrap();
    let w = limiter.route_class("w").unwrap();
    let key = Key::authenticated("acme", "alice", w).unwrap();
    for _ in 0..10 {
        assert_eq!(limiter.admit(&key).await, Decision::Admit);
    }
    assert!(matches!(
        limiter.admit(&key).await,
        Decision::Throttle { .. }
    ));
    // The buckets live on the primary, and reached the replica.
    let primary = sentinel.data(0);
    assert_eq!(sentinel.primary_port(), primary.port());
    assert_eq!(primary.cmd(&["DBSIZE"]), "1");
    assert_eq!(sentinel.data(1).cmd(&["DBSIZE"]), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_failover_fails_closed_and_forgets_no_admission() {
    let sentinel = RedisSentinel::start();
    let old = sentinel.primary_port();
    let limiter = Arc::new(
        RedisLimiter::builder(&sentinel.url(), load::profile())
            .key_secret(b"test")
            .replica_acks(1)
            .connect()
            .await
            .unwrap(),
    );
    let start = Instant::now();
    let loader = tokio::spawn(load::run(
        limiter.clone(),
        24,
        6,
        start + Duration::from_secs(10),
    ));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (sentinel, forced) = tokio::task::spawn_blocking(move || {
        sentinel.force_failover();
        (sentinel, Instant::now())
    })
    .await
    .unwrap();
    let records = loader.await.unwrap();
    let a = load::audit(&records, forced);
    let new = sentinel.primary_port();
    println!(
        "sentinel: SENTINEL FAILOVER :{old} -> :{new} under load: {} admitted, {} throttled, {} \
         refused 503 ({} of 24 identities), last 503 {:?} after the command, most admissions of \
         one identity {} (bound {})\n{}",
        a.admitted,
        a.throttled,
        a.unavailable,
        a.affected.len(),
        a.outage,
        a.most,
        load::SUSTAINED,
        load::timeline(&records, start)
    );
    assert_ne!(new, old, "the replica was promoted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_fails_closed_until_the_sentinels_promote_the_replica() {
    let mut sentinel = RedisSentinel::start();
    let old = sentinel.primary_port();
    let limiter = Arc::new(
        RedisLimiter::builder(&sentinel.url(), load::profile())
            .key_secret(b"test")
            .connect()
            .await
            .unwrap(),
    );
    let start = Instant::now();
    let loader = tokio::spawn(load::run(
        limiter.clone(),
        24,
        6,
        start + Duration::from_secs(10),
    ));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (sentinel, killed) = tokio::task::spawn_blocking(move || {
        sentinel.kill(0);
        (sentinel, Instant::now())
    })
    .await
    .unwrap();
    let records = loader.await.unwrap();
    let a = load::audit(&records, killed);
    let new = sentinel.primary_port();
    println!(
        "sentinel: primary :{old} killed under load, now :{new}: {} admitted, {} throttled, {} \
         refused 503 ({} of 24 identities), last 503 {:?} after the kill, most admissions of \
         one identity {} (bound {})\n{}",
        a.admitted,
        a.throttled,
        a.unavailable,
        a.affected.len(),
        a.outage,
        a.most,
        load::SUSTAINED,
        load::timeline(&records, start)
    );
    assert_ne!(new, old, "the replica was promoted");
    assert_eq!(
        a.affected.len(),
        24,
        "every identity lives on the one primary"
    );
}
