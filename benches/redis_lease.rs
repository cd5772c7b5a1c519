//! Leased tokens against per-decision store calls, in one run on one `redis-server`.
//!
//! `cargo bench --features redis --bench redis_lease` (needs `redis-server` on PATH; starts its
//! own on a free loopback port and stops it).
//!
//! 1. **Below the limits**: four workers (four `RedisLimiter`s, four connections, in one
//!    process) with 16 callers each decide for 10,000 identities round robin, every identity
//!    below its limits (all admitted), once with per-decision store calls and once, after a
//!    warm-up of `BENCH_WARMUP` seconds (default 3), with `lease: { max_tokens: 256, ttl: 10s }`:
//!    decisions per second, store calls per decision (from `INFO commandstats`: decisions and
//!    refunds) and the median and 99th percentile of one decision's time; beside them the
//!    embedded `Limiter` driven and timed the same way by the same callers. `BENCH_LEASE`
//!    replaces the lease (`"lease: { max_tokens: 64, ttl: 2s }"`).
//! 2. **Past the limits**: the four workers drive 100 identities (burst 20 per second,
//!    sustained 200 per hour) as fast as they can for `BENCH_SECS`. Counted from the workers'
//!    side (admissions) and from the store's (the tokens each identity's sustained TAT says it
//!    was charged, after every lease went back): the two must agree, and neither may pass what
//!    the burst allows over the run plus one ttl. The tokens held in leases at the end
//!    (charged, not yet spent) are reported beside their bound, one lease per worker.
//!
//! `BENCH_SECS` (default 3) sets each run's length.

use tollgate_testkit::redis_server;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_server::{charged_at, RedisServer};
use tollgate::redis::RedisLimiter;
use tollgate::{Decision, Key, Limiter, Profile};

const WORKERS: usize = 4;
const CALLERS: usize = 16;
const IDENTITIES: usize = 10_000;
/// The lease of the run past the limits: at most the burst of 20.
const PAST_LEASE: &str = "lease: { max_tokens: 8, ttl: 1s }";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Limits about twice what the bench reaches per identity (a burst of 5,000 per 10s).
fn below(lease: &str) -> Profile {
    Profile::from_yaml(&format!(
        "name: lease-bench\nidentities: {{ capacity: 16384, tenant_share: 1.0 }}\nstore: {{ timeout: 1s }}\n\
         route_classes:\n  api:\n    burst: {{ tokens: 5000, per: 10s }}\n    \
         sustained: {{ tokens: 100000000, per: 1h }}\n    {lease}\n"
    ))
    .unwrap()
}

fn past(lease: &str) -> Profile {
    Profile::from_yaml(&format!(
        "name: lease-bench\nidentities: {{ capacity: 1024 }}\nstore: {{ timeout: 1s }}\n\
         route_classes:\n  api:\n    burst: {{ tokens: 20, per: 1s }}\n    \
         sustained: {{ tokens: 200, per: 1h }}\n    {lease}\n"
    ))
    .unwrap()
}

/// Decisions and refunds the store ran.
fn store_calls(server: &RedisServer) -> u64 {
    ["fcall", "evalsha", "tollgate.admit", "tollgate.refund"]
        .iter()
        .map(|c| server.calls(c))
        .sum()
}

async fn workers(server: &RedisServer, p: &Profile) -> Vec<Arc<RedisLimiter>> {
    let mut all = Vec::new();
    for _ in 0..WORKERS {
        let limiter = RedisLimiter::builder(&server.url(), p.clone())
            .key_secret(b"lease bench")
            .connect()
            .await
            .unwrap();
        all.push(Arc::new(limiter));
    }
    all
}

fn percentile(sorted: &[u64], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    Duration::from_nanos(sorted.get(i).copied().unwrap_or(0))
}

struct Run {
    decisions: u64,
    admitted: u64,
    secs: f64,
    calls: u64,
    p50: Duration,
    p99: Duration,
    /// Sampled at refusals (past the limits only): tokens the identity's other leases held.
    held_at_refusal: Vec<u64>,
}

/// Who decides: a worker of the fleet, or the embedded limiter (shared by the same callers).
#[derive(Clone)]
enum Target {
    Fleet(Arc<RedisLimiter>),
    Embedded(Arc<Limiter>),
}

/// The callers of every target (16 each) deciding for `identities` round robin for `secs`:
/// what they did, and the time of one decision in 16.
async fn drive(
    server: &RedisServer,
    targets: &[Target],
    identities: usize,
    secs: u64,
    admitted_by: Option<Arc<Vec<AtomicU64>>>,
) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let calls = store_calls(server);
    let port = server.port();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (w, target) in targets.iter().enumerate() {
        for c in 0..CALLERS {
            let (target, stop, admitted_by) = (target.clone(), stop.clone(), admitted_by.clone());
            tasks.push(tokio::spawn(async move {
                let class = match &target {
                    Target::Fleet(l) => l.route_class("api"),
                    Target::Embedded(l) => l.route_class("api"),
                }
                .unwrap();
                let (mut decisions, mut admitted, mut times) = (0u64, 0u64, Vec::new());
                let (mut refused, mut held) = (0u64, Vec::new());
                let mut i = (w * CALLERS + c) * 7919;
                let names: Vec<String> = (0..identities).map(|n| format!("p{n}")).collect();
                while !stop.load(Ordering::Relaxed) {
                    i = (i + 1) % identities;
                    let key = Key::authenticated("acme", &names[i], class).unwrap();
                    let t = Instant::now();
                    let d = match &target {
                        Target::Fleet(l) => l.admit(&key).await,
                        Target::Embedded(l) => l.admit(&key),
                    };
                    if decisions % 16 == 0 {
                        times.push(t.elapsed().as_nanos() as u64);
                    }
                    decisions += 1;
                    match d {
                        Decision::Admit => {
                            admitted += 1;
                            if let Some(by) = &admitted_by {
                                by[i].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Decision::Throttle { .. } => {
                            refused += 1;
                            // What the store charged and no worker admitted is in leases: a
                            // refused caller holds none of its own, so the others hold it.
                            if let (Some(by), Target::Fleet(l), 0) =
                                (&admitted_by, &target, refused % 16)
                            {
                                let charged = charged_at(port, &l.store_command(&key));
                                held.push(charged.saturating_sub(by[i].load(Ordering::Relaxed)));
                            }
                        }
                        d => panic!("unexpected {d:?}"),
                    }
                    // Decisions that need no round trip never yield: let the other callers in.
                    if decisions % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                (decisions, admitted, times, held)
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut run = Run {
        decisions: 0,
        admitted: 0,
        secs: 0.0,
        calls: 0,
        p50: Duration::ZERO,
        p99: Duration::ZERO,
        held_at_refusal: Vec::new(),
    };
    let mut times = Vec::new();
    for t in tasks {
        let (d, a, ts, held) = t.await.unwrap();
        run.held_at_refusal.extend(held);
        run.decisions += d;
        run.admitted += a;
        times.extend(ts);
    }
    run.secs = start.elapsed().as_secs_f64();
    run.calls = store_calls(server) - calls;
    times.sort_unstable();
    run.p50 = percentile(&times, 0.5);
    run.p99 = percentile(&times, 0.99);
    run
}

fn fleet(all: &[Arc<RedisLimiter>]) -> Vec<Target> {
    all.iter().cloned().map(Target::Fleet).collect()
}

/// The tokens the store holds charged for `p{who}`: its sustained TAT ahead of the server's
/// clock in whole tokens (one refills every 18s, so a charge within the run counts whole).
fn charged(server: &RedisServer, limiter: &RedisLimiter, who: usize) -> u64 {
    let class = limiter.route_class("api").unwrap();
    let name = format!("p{who}");
    let key = Key::authenticated("acme", &name, class).unwrap();
    server.charged(&limiter.store_command(&key))
}

fn main() {
    let secs = env("BENCH_SECS", 3).max(1);
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let warmup = env("BENCH_WARMUP", 3);
    let lease =
        std::env::var("BENCH_LEASE").unwrap_or("lease: { max_tokens: 256, ttl: 10s }".into());
    let lease = lease.as_str();

    println!(
        "## Below the limits: {WORKERS} workers x {CALLERS} callers, {IDENTITIES} identities, \
         {secs}s after {warmup}s of warm-up\n"
    );
    println!("| mode | decisions/s | store calls per decision | p50 | p99 | refused |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let (per_decision, leased, local, store) = rt.block_on(async {
        let plain = workers(&server, &below("")).await;
        let store = plain[0].store_program();
        let per_decision = drive(&server, &fleet(&plain), IDENTITIES, secs, None).await;
        drop(plain);
        server.cmd(&["FLUSHALL"]);
        let all = workers(&server, &below(lease)).await;
        drive(&server, &fleet(&all), IDENTITIES, warmup, None).await;
        let leased = drive(&server, &fleet(&all), IDENTITIES, secs, None).await;
        for w in &all {
            w.return_leases().await;
        }
        let embedded = Arc::new(Limiter::builder(below("")).build().unwrap());
        let targets = vec![Target::Embedded(embedded); WORKERS];
        let local = drive(&server, &targets, IDENTITIES, secs, None).await;
        (per_decision, leased, local, store)
    });
    for (name, r) in [
        (format!("per decision ({store})"), &per_decision),
        (format!("leased, {lease}"), &leased),
        ("embedded Limiter".to_owned(), &local),
    ] {
        println!(
            "| {name} | {:.0} | {:.4} | {:.2?} | {:.2?} | {} |",
            r.decisions as f64 / r.secs,
            r.calls as f64 / r.decisions as f64,
            r.p50,
            r.p99,
            r.decisions - r.admitted
        );
    }
    let rate = |r: &Run| r.decisions as f64 / r.secs;
    let calls = |r: &Run| r.calls as f64 / r.decisions as f64;
    println!(
        "\nleased against per decision: {:.1}x the decisions/s, {:.0}x fewer store calls per \
         decision; leased p50 / embedded p50: {:.2}; per identity {:.1} decisions/s of the \
         burst's 500\n",
        rate(&leased) / rate(&per_decision),
        calls(&per_decision) / calls(&leased),
        leased.p50.as_secs_f64() / local.p50.as_secs_f64(),
        rate(&leased) / IDENTITIES as f64,
    );

    println!("## Past the limits: {WORKERS} workers x {CALLERS} callers, 100 identities, burst 20/s, sustained 200/h, {PAST_LEASE}\n");
    server.cmd(&["FLUSHALL"]);
    let identities = 100;
    rt.block_on(async {
        let all = workers(&server, &past(PAST_LEASE)).await;
        let by: Arc<Vec<AtomicU64>> = Arc::new((0..identities).map(|_| AtomicU64::new(0)).collect());
        let run = drive(&server, &fleet(&all), identities, secs, Some(by.clone())).await;
        // The burst allows 20 at once and 20 a second: over the run plus one ttl (a leased
        // token is spent at most one ttl after its charge).
        let allowed = 20 + (20.0 * (run.secs + 1.0)).ceil() as u64;
        let (mut held_most, mut over, mut most) = (0u64, 0u64, 0u64);
        for who in 0..identities {
            let admitted = by[who].load(Ordering::Relaxed);
            let held = charged(&server, &all[0], who);
            held_most = held_most.max(held.saturating_sub(admitted));
            over += admitted.saturating_sub(allowed);
            most = most.max(admitted);
        }
        let mut returned = 0;
        for w in &all {
            returned += w.return_leases().await;
        }
        let (mut store_total, mut worker_total, mut disagree) = (0, 0, 0);
        for who in 0..identities {
            let admitted = by[who].load(Ordering::Relaxed);
            let store = charged(&server, &all[0], who);
            store_total += store;
            worker_total += admitted;
            disagree += u64::from(store != admitted);
        }
        println!("| | |\n| --- | ---: |");
        println!("| decisions | {} |", run.decisions);
        println!("| admitted (workers' count) | {worker_total} |");
        println!("| charged (store's count, after the leases went back) | {store_total} |");
        println!("| identities whose two counts differ | {disagree} |");
        println!("| most admitted for one identity | {most} (the burst allows {allowed} over {:.1}s + ttl) |", run.secs);
        println!("| admissions over that, all identities | {over} |");
        println!("| most tokens held in leases for one identity at the end | {held_most} (at most {WORKERS} x 8, one lease per worker) |");
        let samples = &run.held_at_refusal;
        println!(
            "| tokens other workers held for an identity at a refusal (one refusal in 16 sampled) | \
             mean {:.2}, most {} over {} samples (at most ({WORKERS} - 1) x 8 = {}) |",
            samples.iter().sum::<u64>() as f64 / samples.len().max(1) as f64,
            samples.iter().max().copied().unwrap_or(0),
            samples.len(),
            (WORKERS - 1) * 8,
        );
        println!("| tokens given back at shutdown | {returned} |");
        println!("| store calls per decision | {:.3} |", run.calls as f64 / run.decisions as f64);
    });
}
