//! Decisions per second of the Redis backend on loopback, beside the floor: plain `INCR`s over
//! the same kind of connection (one round trip each, no script).
//!
//! `cargo bench --features redis --bench redis` (needs `redis-server` on PATH; starts its own on
//! a free loopback port). `BENCH_SECS` (default 2) and `BENCH_CALLERS` (default 64) change the
//! run. Compare with `redis-benchmark -t incr -c 64 -n 200000 -q` against a server of your own.

use tollgate_testkit::redis_server;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_server::RedisServer;
use tollgate::redis::RedisLimiter;
use tollgate::{Key, Profile};

const PROFILE: &str = "name: bench\nidentities: { capacity: 1024 }\nstore: { timeout: 1s }\n\
    route_classes:\n  read:\n    burst: { tokens: 1000000, per: 1s }\n    sustained: { tokens: 100000000, per: 1h }\n";

const CAPACITY: &str =
    "shared_capacity: { shards: 16, window: 1s, slots_per_window: 10000000, tenant_share: 0.5 }\n";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `callers` tasks calling `op(caller, i)` for `secs`; returns operations per second.
async fn run<F, Fut>(callers: u64, secs: u64, op: F) -> f64
where
    F: Fn(u64, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let op = Arc::new(op);
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..callers {
        let (op, done, failed, measuring, stop) = (
            op.clone(),
            done.clone(),
            failed.clone(),
            measuring.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let ok = op(c, i).await;
                if measuring.load(Ordering::Relaxed) {
                    done.fetch_add(1, Ordering::Relaxed);
                    if !ok {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // warm up
    measuring.store(true, Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let failed = failed.load(Ordering::Relaxed);
    assert_eq!(failed, 0, "operations failed during the run");
    done.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64()
}

fn main() {
    let secs = env("BENCH_SECS", 2);
    let callers = env("BENCH_CALLERS", 64);
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_connection_manager().await.unwrap();
        let incr = run(callers, secs, move |c, _| {
            let mut conn = conn.clone();
            async move {
                redis::cmd("INCR")
                    .arg(format!("bench:{c}"))
                    .query_async::<u64>(&mut conn)
                    .await
                    .is_ok()
            }
        })
        .await;

        let mut results = Vec::new();
        for (name, yaml) in [
            ("admit", PROFILE.to_owned()),
            ("admit+capacity", format!("{PROFILE}{CAPACITY}")),
        ] {
            let profile = Profile::from_yaml(&yaml).unwrap();
            let limiter = Arc::new(
                RedisLimiter::builder(&server.url(), profile)
                    .key_prefix(name)
                    .connect()
                    .await
                    .unwrap(),
            );
            let read = limiter.route_class("read").unwrap();
            let rate = run(callers, secs, move |c, i| {
                let limiter = limiter.clone();
                async move {
                    // 100 tenants x 100 principals.
                    let tenant = format!("tenant{}", c % 100);
                    let principal = format!("user{}", (i * 64 + c) % 100);
                    let key = Key::authenticated(&tenant, &principal, read).unwrap();
                    limiter.admit(&key).await.is_admit()
                }
            })
            .await;
            results.push((name, rate));
        }

        println!("redis backend, loopback, {callers} concurrent callers, {secs}s each:");
        println!("  INCR (floor)      {incr:>10.0} ops/s");
        for (name, rate) in results {
            println!(
                "  {name:<17} {rate:>10.0} decisions/s  ({:.2} of INCR)",
                rate / incr
            );
        }
    });
}
