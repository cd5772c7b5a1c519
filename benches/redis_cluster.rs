//! Decisions per second of the Redis backend with 64 concurrent callers on one node, on a
//! 3-primary (+3 replica) Redis Cluster, and on the cluster with each decision acknowledged by
//! a replica (`replica_acks(1)`), all started by this bench on loopback, in one run.
//!
//! `nice cargo bench --features redis --bench redis_cluster` (needs `redis-server` and
//! `redis-cli`: `apt-get install redis-server`). `BENCH_SECS` (default 3) and `BENCH_CALLERS`
//! (default 64) change the run. Everything (client and seven servers) shares this machine's
//! cores: the cluster's figure is what spreading the keys costs or gains here, not what three
//! machines would give.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::redis::RedisLimiter;
use tollgate::{Decision, Key, Profile};
use tollgate_testkit::redis_cluster::RedisCluster;
use tollgate_testkit::redis_server::RedisServer;

const PROFILE: &str = "name: bench\nidentities: { capacity: 1024 }\nstore: { timeout: 1s }\n\
    route_classes:\n  read:\n    burst: { tokens: 1000000, per: 1s }\n    sustained: { tokens: 100000000, per: 1h }\n";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `callers` tasks deciding for 100 tenants x 100 principals for `secs` (after 300ms of warm
/// up): decisions per second. Panics if any decision was not an admission.
async fn decisions_per_sec(limiter: RedisLimiter, callers: u64, secs: u64) -> f64 {
    let limiter = Arc::new(limiter);
    let read = limiter.route_class("read").unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..callers {
        let (limiter, done, refused, measuring, stop) = (
            limiter.clone(),
            done.clone(),
            refused.clone(),
            measuring.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let tenant = format!("tenant{}", c % 100);
                let principal = format!("user{}", (i * 64 + c) % 100);
                let key = Key::authenticated(&tenant, &principal, read).unwrap();
                let d = limiter.admit(&key).await;
                if measuring.load(Ordering::Relaxed) {
                    done.fetch_add(1, Ordering::Relaxed);
                    if d != Decision::Admit {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    measuring.store(true, Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(refused.load(Ordering::Relaxed), 0, "decisions refused");
    done.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64()
}

fn main() {
    let secs = env("BENCH_SECS", 3);
    let callers = env("BENCH_CALLERS", 64);
    let server = RedisServer::start();
    let cluster = RedisCluster::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let results = rt.block_on(async {
        let mut results = Vec::new();
        for (name, url, acks) in [
            ("one node", server.url(), 0),
            ("cluster 3+3", cluster.url(), 0),
            ("cluster 3+3, acks 1", cluster.url(), 1),
        ] {
            let profile = Profile::from_yaml(PROFILE).unwrap();
            let limiter = RedisLimiter::builder(&url, profile)
                .key_secret(b"bench")
                .key_prefix(&format!("bench{acks}"))
                .replica_acks(acks)
                .connect()
                .await
                .unwrap();
            results.push((name, decisions_per_sec(limiter, callers, secs).await));
        }
        results
    });
    let base = results[0].1;
    println!("redis backend, loopback, {callers} concurrent callers, {secs}s each:");
    for (name, rate) in results {
        println!(
            "  {name:<20} {rate:>10.0} decisions/s  ({:.2} of one node)",
            rate / base
        );
    }
}
