//! `replica_acks`: a decision counts only once that many replicas hold its writes; a server
//! without replicas cannot acknowledge, so every decision fails closed (and nothing is admitted).

use tollgate_testkit::redis_server::RedisServer;

use tollgate::redis::RedisLimiter;
use tollgate::{Cause, Decision, Key, Profile};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_replicas_asked_for_every_decision_fails_closed() {
    let server = RedisServer::start();
    let p = Profile::from_yaml(
        "name: acks\nidentities: { capacity: 64 }\nstore: { timeout: 40ms }\n\
         route_classes:\n  w:\n    burst: { tokens: 5, per: 1m }\n    sustained: { tokens: 100, per: 1h }\n",
    )
    .unwrap();
    let limiter = RedisLimiter::builder(&server.url(), p.clone())
        .key_secret(b"test")
        .replica_acks(1)
        .connect()
        .await
        .unwrap();
    let w = limiter.route_class("w").unwrap();
    let key = Key::authenticated("acme", "alice", w).unwrap();
    for _ in 0..3 {
        assert_eq!(
            limiter.admit(&key).await,
            Decision::Unavailable {
                retry_after: None,
                cause: Cause::StoreUnavailable
            }
        );
    }
    // The script ran (its charges stand, erring towards refusing): 3 of 5 burst tokens used
    // (one refills every 12 s: however slow the machine, none comes back during the test).
    assert_eq!(server.calls("wait"), 3);
    let plain = RedisLimiter::builder(&server.url(), p)
        .key_secret(b"test")
        .connect()
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(plain.admit(&key).await, Decision::Admit);
    }
    assert!(matches!(plain.admit(&key).await, Decision::Throttle { .. }));
}
