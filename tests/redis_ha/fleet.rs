//! One profile for the fleet on a Redis Cluster and through Sentinels: watchers there do not
//! subscribe, they poll the version through the limiter's own connection (which follows
//! `MOVED` and the Sentinels' primary), and switch within the poll.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::redis::{FleetProfile, RedisLimiter};
use tollgate::Profile;

use crate::load;

/// Two watching workers and a publisher on `url`: the publish reaches both (bounded wait).
async fn two_workers_switch(url: &str, what: &str) {
    let mut workers = Vec::new();
    let mut watches = Vec::new();
    for _ in 0..2 {
        let mut p = load::profile();
        p.store.timeout = tollgate::profile::Period::from_secs(5).unwrap();
        let limiter = Arc::new(
            RedisLimiter::builder(url, p)
                .key_secret(b"test")
                .connect()
                .await
                .unwrap(),
        );
        watches.push(limiter.watch_profile("ha").await.unwrap());
        workers.push(limiter);
    }
    let fleet = FleetProfile::connect(url, "tollgate", "ha").await.unwrap();
    let yaml = serde_yaml_ng::to_string(&*workers[0].profile())
        .unwrap()
        .replace("tokens: 10", "tokens: 12");
    assert!(Profile::from_yaml(&yaml).is_ok(), "{yaml}");
    let sent = Instant::now();
    assert_eq!(fleet.publish(&yaml).await.unwrap(), 1);
    while workers.iter().any(|w| w.profile_version() != Some(1)) {
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "not switched in 5s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!(
        "fleet switch on {what} (polled): both within {:?}",
        sent.elapsed()
    );
    for w in &workers {
        assert_eq!(w.profile().route_class("w").unwrap().burst.tokens.get(), 12);
    }
}

#[cfg(feature = "redis-cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_profile_reaches_watchers_on_a_cluster() {
    let cluster = tollgate_testkit::redis_cluster::RedisCluster::start();
    two_workers_switch(&cluster.url(), "a 3+3 cluster").await;
}

#[cfg(feature = "redis-sentinel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_profile_reaches_watchers_through_sentinels() {
    let sentinel = tollgate_testkit::redis_sentinel::RedisSentinel::start();
    two_workers_switch(&sentinel.url(), "Sentinels").await;
}
