//! Redis CPU per tollgate decision, beside `INCR` and redis-cell's `CL.THROTTLE`, in one run.
//!
//! `cargo bench --features redis --bench redis_cost` (needs `redis-server` and
//! `redis-benchmark` on PATH; starts its own server on a free loopback port and stops it).
//!
//! 1. A fixed number of decisions through `RedisLimiter` (64 concurrent callers, 10 tenants x
//!    100 principals, quotas that mostly admit), for both buckets and then with shared
//!    capacity, with the Redis function and with tollgate's Redis module (`redis-module/`, built
//!    here unless `TOLLGATE_REDIS_MODULE` names it; the server loads it); `INFO commandstats`
//!    gives the decision command's `usec_per_call` (`fcall`, `tollgate.admit`, or `evalsha` on
//!    servers without functions): the Redis CPU of one decision, the calls it makes inside
//!    included.
//! 2. `redis-benchmark -P 16 -c 64` for `INCR`, for the decision command exactly as the limiter
//!    sends it (identities drawn from 100,000 with `__rand_int__`), and for `CL.THROTTLE` if
//!    `TOLLGATE_REDIS_CELL` names redis-cell's module (`libredis_cell.so`; skipped with a
//!    message otherwise): requests per second and `usec_per_call` of each.
//!
//! Every figure is the median of `BENCH_ROUNDS` (default 3) rounds; `BENCH_DECISIONS` (default
//! 50,000) and `BENCH_REQUESTS` (default 300,000) set the sizes.

use tollgate_testkit::{redis_module, redis_server};

use std::process::Command;
use std::sync::Arc;

use redis_server::RedisServer;
use tollgate::redis::RedisLimiter;
use tollgate::{Key, Profile};

const PROFILE: &str = "name: cost\nidentities: { capacity: 1024 }\nstore: { timeout: 2s }\n\
    route_classes:\n  read:\n    burst: { tokens: 100, per: 1s }\n    sustained: { tokens: 100000, per: 1h }\n";

const CAPACITY: &str =
    "shared_capacity: { shards: 16, window: 1s, slots_per_window: 10000000, tenant_share: 0.5 }\n";

/// The environment variable naming redis-cell's module.
const CELL_ENV: &str = "TOLLGATE_REDIS_CELL";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `usec_per_call` and `calls` of `command` in `INFO commandstats`.
fn stat(server: &RedisServer, command: &str) -> (f64, u64) {
    let info = server.cmd(&["INFO", "commandstats"]);
    let tag = format!("cmdstat_{command}:");
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix(&tag))
        .unwrap_or_else(|| panic!("no {command} in commandstats: {info}"));
    let field = |name: &str| -> f64 {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    (field("usec_per_call="), field("calls=") as u64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The decision command in commandstats: `fcall`, `tollgate.admit` or `evalsha`.
fn verb(words: &[String]) -> String {
    words[0].to_ascii_lowercase()
}

/// Runs `decisions` decisions through `limiter` from 64 tasks; returns the admitted share.
async fn decide(limiter: &Arc<RedisLimiter>, decisions: u64) -> f64 {
    let read = limiter.route_class("read").unwrap();
    let tasks: Vec<_> = (0..64u64)
        .map(|c| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut admitted = 0u64;
                for i in 0..decisions / 64 {
                    let tenant = format!("tenant{}", (c + i) % 10);
                    let principal = format!("user{}", (i * 64 + c) % 100);
                    let key = Key::authenticated(&tenant, &principal, read).unwrap();
                    let d = limiter.admit(&key).await;
                    assert!(
                        !matches!(d, tollgate::Decision::Unavailable { .. })
                            || d.retry_after().is_some(),
                        "the store failed during the run: {d:?}"
                    );
                    admitted += u64::from(d.is_admit());
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    admitted as f64 / (decisions / 64 * 64) as f64
}

/// `redis-benchmark -P 16 -c 64` of one command: requests per second.
fn benchmark(server: &RedisServer, requests: u64, words: &[String]) -> f64 {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
        .args(["-P", "16", "-c", "64", "-r", "100000", "-q"])
        .args(["-n", &requests.to_string()])
        .args(words)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run redis-benchmark ({e}): install it with `apt-get install redis-tools`"
            )
        });
    let text = String::from_utf8_lossy(&out.stdout);
    // The last progress line: "<command>: 123456.78 requests per second, p50=..".
    text.rsplit(['\r', '\n'])
        .find_map(|l| {
            let (_, rest) = l.rsplit_once(": ")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no rate in redis-benchmark's output: {text}"))
}

/// The command the limiter sends for one identity, with the identity drawn by redis-benchmark.
fn randomized(mut words: Vec<String>) -> Vec<String> {
    let identity = words
        .iter_mut()
        .find(|w| w.contains(":i:"))
        .expect("an identity key");
    let at = identity.find(":i:").unwrap() + 3;
    identity.replace_range(at.., "__rand_int__");
    words
}

fn main() {
    let rounds = env("BENCH_ROUNDS", 3).max(1);
    let decisions = env("BENCH_DECISIONS", 50_000);
    let requests = env("BENCH_REQUESTS", 300_000);
    let cell = std::env::var(CELL_ENV)
        .ok()
        .filter(|p| std::path::Path::new(p).exists());
    let module = redis_module::path();
    let server = match &cell {
        Some(path) => RedisServer::start_with(&["--loadmodule", &module, "--loadmodule", path]),
        None => RedisServer::start_with(&["--loadmodule", &module]),
    };
    let version = server.cmd(&["INFO", "server"]);
    let version = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    let mut rows: Vec<(String, f64, f64)> = Vec::new();
    for (name, yaml, use_module) in [
        ("both buckets", PROFILE.to_owned(), false),
        (
            "with shared capacity",
            format!("{PROFILE}{CAPACITY}"),
            false,
        ),
        ("both buckets", PROFILE.to_owned(), true),
        ("with shared capacity", format!("{PROFILE}{CAPACITY}"), true),
    ] {
        let (mut usec, mut admitted, mut rps, mut bench_usec) = (vec![], vec![], vec![], vec![]);
        let mut command = Vec::new();
        for round in 0..rounds {
            let limiter = rt.block_on(async {
                RedisLimiter::builder(&server.url(), Profile::from_yaml(&yaml).unwrap())
                    .key_prefix(&format!("cost{round}"))
                    .key_secret(b"bench")
                    .redis_module(use_module)
                    .connect()
                    .await
                    .unwrap()
            });
            let limiter = Arc::new(limiter);
            let read = limiter.route_class("read").unwrap();
            command = limiter.store_command(&Key::authenticated("tenant0", "user0", read).unwrap());
            let verb = verb(&command);
            // Warm: every identity has a key, as in steady state.
            rt.block_on(decide(&limiter, 6_400));
            server.cmd(&["CONFIG", "RESETSTAT"]);
            admitted.push(rt.block_on(decide(&limiter, decisions)));
            let (per_call, calls) = stat(&server, &verb);
            assert!(calls >= decisions / 64 * 64, "{calls} calls");
            usec.push(per_call);

            server.cmd(&["CONFIG", "RESETSTAT"]);
            rps.push(benchmark(&server, requests, &randomized(command.clone())));
            bench_usec.push(stat(&server, &verb).0);
            server.cmd(&["FLUSHDB"]);
        }
        println!(
            "tollgate, {name}: {:.2} us of Redis CPU per decision ({}, median of {rounds} x {decisions} decisions, {:.0}% admitted)",
            median(usec.clone()),
            verb(&command),
            median(admitted) * 100.0
        );
        rows.push((
            format!("tollgate {} ({name})", command[0]),
            median(rps),
            median(bench_usec),
        ));
    }

    let mut floor = |label: &str, words: &[&str], stat_name: &str| {
        let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
        let (mut rps, mut usec) = (vec![], vec![]);
        for _ in 0..rounds {
            server.cmd(&["CONFIG", "RESETSTAT"]);
            rps.push(benchmark(&server, requests, &words));
            usec.push(stat(&server, stat_name).0);
            server.cmd(&["FLUSHDB"]);
        }
        rows.push((label.to_owned(), median(rps), median(usec)));
    };
    floor("INCR", &["INCR", "bench:__rand_int__"], "incr");
    match &cell {
        // 100 tokens per second, burst 100: the same shape as the profile's burst.
        Some(_) => floor(
            "redis-cell CL.THROTTLE",
            &["CL.THROTTLE", "cell:__rand_int__", "99", "100", "1", "1"],
            "cl.throttle",
        ),
        None => println!(
            "redis-cell: skipped ({CELL_ENV} does not name its module; build \
             github.com/brandur/redis-cell with `cargo build --release` and set \
             {CELL_ENV}=.../target/release/libredis_cell.so)"
        ),
    }
    println!(
        "\nredis-benchmark -P 16 -c 64 -r 100000 -n {requests}, redis {version}, median of {rounds}:"
    );
    println!("| command | requests/s | us per call (commandstats) |");
    println!("| --- | ---: | ---: |");
    for (label, rps, usec) in rows {
        println!("| {label} | {rps:.0} | {usec:.2} |");
    }
}
