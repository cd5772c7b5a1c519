//! The store goes away: every decision fails closed (503 `limiter_unavailable`, no wait) within
//! the profile's `store.timeout`, and decisions resume by themselves once it is back.

use tollgate_testkit::redis_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_server::RedisServer;
use tollgate::redis::RedisLimiter;
use tollgate::{Cause, Decision, Key, Profile};

const TIMEOUT: Duration = Duration::from_millis(50);
/// Scheduling on a busy two-core machine.
const SLACK: Duration = Duration::from_millis(75);

fn profile() -> Profile {
    Profile::from_yaml(
        "name: o\nidentities: { capacity: 64 }\nstore: { timeout: 50ms }\n\
         route_classes:\n  w:\n    burst: { tokens: 100000, per: 1s }\n    sustained: { tokens: 1000000, per: 1h }\n",
    )
    .unwrap()
}

const UNAVAILABLE: Decision = Decision::Unavailable {
    retry_after: None,
    cause: Cause::StoreUnavailable,
};

/// (started, took, decision) of every decision of `tasks` loops until `stop`.
async fn load(
    limiter: Arc<RedisLimiter>,
    tasks: usize,
    stop: Instant,
) -> Vec<(Instant, Duration, Decision)> {
    let w = limiter.route_class("w").unwrap();
    let mut handles = Vec::new();
    for i in 0..tasks {
        let limiter = limiter.clone();
        handles.push(tokio::spawn(async move {
            let principal = format!("p{i}");
            let mut seen = Vec::new();
            while Instant::now() < stop {
                let key = Key::authenticated("acme", &principal, w).unwrap();
                let start = Instant::now();
                let d = limiter.admit(&key).await;
                seen.push((start, start.elapsed(), d));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            seen
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_load_fails_closed_then_resumes_within_a_second() {
    let mut server = RedisServer::start();
    let limiter = Arc::new(
        RedisLimiter::connect(&server.url(), profile())
            .await
            .unwrap(),
    );
    let t0 = Instant::now();
    let loader = tokio::spawn(load(limiter.clone(), 4, t0 + Duration::from_millis(2_300)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killing = Instant::now();
    server.kill(); // SIGKILL, then waits for the process to be gone
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let restarting = Instant::now();
    // `restart` returns once the new server answers PING.
    let _server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    let all = loader.await.unwrap();

    for (start, took, d) in &all {
        assert!(*took <= TIMEOUT + SLACK, "a decision took {took:?}: {d:?}");
        if *start + *took < killing {
            assert_eq!(*d, Decision::Admit, "before the kill");
        } else if *start < killed {
            // In flight while the server died: answered, or failed closed.
            assert!(
                *d == Decision::Admit || *d == UNAVAILABLE,
                "across the kill: {d:?}"
            );
        } else if *start < restarting {
            assert_eq!(*d, UNAVAILABLE, "during the outage");
        }
    }
    let during = all
        .iter()
        .filter(|(s, _, _)| *s >= killed && *s < restarting)
        .count();
    assert!(during >= 20, "{during} decisions during the outage");
    let resumed = all
        .iter()
        .filter(|(s, _, d)| *s >= restarting && d.is_admit())
        .map(|(s, _, _)| *s)
        .min()
        .expect("decisions resumed");
    assert!(
        resumed - restarting <= Duration::from_secs(1),
        "resumed {:?} after the restart",
        resumed - restarting
    );
    // Once resumed, they stay resumed.
    let late = all
        .iter()
        .filter(|(s, _, _)| *s > resumed + Duration::from_millis(100));
    for (_, _, d) in late {
        assert_eq!(*d, Decision::Admit);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_times_out_closed_then_resumes() {
    let server = RedisServer::start();
    let limiter = Arc::new(
        RedisLimiter::connect(&server.url(), profile())
            .await
            .unwrap(),
    );
    let w = limiter.route_class("w").unwrap();
    let key = Key::authenticated("acme", "alice", w).unwrap();
    assert_eq!(limiter.admit(&key).await, Decision::Admit);
    server.freeze(true);
    for _ in 0..10 {
        let start = Instant::now();
        assert_eq!(limiter.admit(&key).await, UNAVAILABLE);
        let took = start.elapsed();
        assert!(took >= TIMEOUT && took <= TIMEOUT + SLACK, "{took:?}");
    }
    server.freeze(false);
    let thawed = Instant::now();
    while limiter.admit(&key).await != Decision::Admit {
        assert!(thawed.elapsed() < Duration::from_secs(1), "did not resume");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_a_dead_server_fails_in_bounded_time() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let start = Instant::now();
    let r = RedisLimiter::builder(&url, profile())
        .connect_timeout(Duration::from_millis(300))
        .connect()
        .await;
    assert!(r.is_err());
    assert!(
        start.elapsed() < Duration::from_millis(300) + SLACK,
        "{:?}",
        start.elapsed()
    );
    let msg = r.unwrap_err().to_string();
    assert!(!msg.is_empty());
}

/// Decisions that timed out must never be charged later: with the server stopped (SIGSTOP) for
/// 3 s, 8 admits all answer 503; after SIGCONT the queued calls run, and a bucket of 10 that
/// admitted nothing must still have 10. Each charging call carries its deadline on the
/// server's clock and the script charges nothing past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_that_timed_out_are_never_charged() {
    let server = RedisServer::start();
    let p = Profile::from_yaml(
        "name: o\nidentities: { capacity: 64 }\nstore: { timeout: 50ms }\n\
         shared_capacity: { shards: 1, window: 1h, slots_per_window: 1000, tenant_share: 1.0 }\n\
         route_classes:\n  w:\n    burst: { tokens: 10, per: 1h }\n    sustained: { tokens: 10, per: 1h }\n",
    )
    .unwrap();
    let limiter = RedisLimiter::builder(&server.url(), p)
        .key_secret(b"test")
        .connect()
        .await
        .unwrap();
    let w = limiter.route_class("w").unwrap();
    let key = Key::authenticated("acme", "alice", w).unwrap();
    // Warm the connection (and the offset estimate) with a peek, which charges nothing.
    assert_eq!(limiter.peek(&key).await, Decision::Admit);
    server.freeze(true);
    let frozen = Instant::now();
    for _ in 0..8 {
        let start = Instant::now();
        assert_eq!(limiter.admit(&key).await, UNAVAILABLE);
        assert!(start.elapsed() <= TIMEOUT + SLACK, "{:?}", start.elapsed());
    }
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(frozen.elapsed())).await;
    server.freeze(false);
    // The queued scripts run first on this connection; a peek after them sees what they left.
    let thawed = Instant::now();
    while limiter.peek(&key).await != Decision::Admit {
        assert!(thawed.elapsed() < Duration::from_secs(2), "did not resume");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let state: Vec<String> = server
        .keys()
        .into_iter()
        .filter(|k| k.contains(":i:") || k.contains(":t:") || k.ends_with(":s"))
        .map(|k| {
            let v = server.cmd(&["GET", &k]);
            format!("{k} = {v}")
        })
        .collect();
    let mut admitted = 0;
    while limiter.admit(&key).await.is_admit() {
        admitted += 1;
        assert!(admitted <= 10);
    }
    eprintln!(
        "after 8 refused admits across a 3 s SIGSTOP, {admitted} of 10 tokens were left; \
         state the refused calls left: {state:?}"
    );
    assert!(state.is_empty(), "refused calls left state: {state:?}");
    assert_eq!(admitted, 10, "the refused admits were charged");
}
