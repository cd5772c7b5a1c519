//! A primary, a replica and three Sentinels: decisions through the Sentinels' primary, and a
//! forced failover (`SENTINEL FAILOVER`) under load.

use std::sync::Arc;
use std::time::Duration;

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
    let (sentinel, (), run) = load::across(
        limiter,
        (24, 6),
        Duration::from_secs(10),
        sentinel,
        |sentinel| sentinel.force_failover(),
    )
    .await;
    let new = sentinel.primary_port();
    println!(
        "sentinel: SENTINEL FAILOVER :{old} -> :{new} under load: {}",
        run.report("the command")
    );
    assert_ne!(new, old, "the replica was promoted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_fails_closed_until_the_sentinels_promote_the_replica() {
    let sentinel = RedisSentinel::start();
    let old = sentinel.primary_port();
    let limiter = Arc::new(
        RedisLimiter::builder(&sentinel.url(), load::profile())
            .key_secret(b"test")
            .connect()
            .await
            .unwrap(),
    );
    let (sentinel, (), run) = load::across(
        limiter,
        (24, 6),
        Duration::from_secs(10),
        sentinel,
        |sentinel| sentinel.kill(0),
    )
    .await;
    let new = sentinel.primary_port();
    println!(
        "sentinel: primary :{old} killed under load, now :{new}: {}",
        run.report("the kill")
    );
    let a = &run.audit;
    assert_ne!(new, old, "the replica was promoted");
    assert_eq!(
        a.affected.len(),
        24,
        "every identity lives on the one primary"
    );
}
