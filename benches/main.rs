//! tollgate against governor and against the physical floor, side by side in one run.
//!
//! `cargo bench --bench main` (all groups) or `cargo bench --bench main -- hot_key`. Peers are
//! in the same group so that ratios are read off one run; see `benches/README.md`.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use tollgate::{Key, Limiter, Profile, RouteClass};

/// Quotas so large that nothing is ever refused: every call takes the admit path (the write).
fn tollgate_limiter(capacity: u64) -> (Limiter, RouteClass) {
    tollgate_limiter_with(capacity, "")
}

/// The same, with extra profile text (shared capacity for the fairness group).
fn tollgate_limiter_with(capacity: u64, extra: &str) -> (Limiter, RouteClass) {
    let profile = Profile::from_yaml(&format!(
        "name: bench\nidentities: {{ capacity: {capacity} }}\nroute_classes:\n  read:\n    \
         burst: {{ tokens: 4000000000, per: 1s }}\n    sustained: {{ tokens: 4000000000, per: 1s }}\n{extra}"
    ))
    .unwrap();
    let l = Limiter::builder(profile).build().unwrap();
    let c = l.route_class("read").unwrap();
    (l, c)
}

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::MAX)
}

/// A 25-byte key as governor sees it, and the same identity split as tollgate sees it.
fn names(i: usize) -> (String, String, String) {
    let tenant = format!("tenant-{:03}", i % 1000);
    let principal = format!("user-{i:09}");
    let joined = format!("{tenant}/{principal}/read");
    (tenant, principal, joined)
}

/// One 64-byte line, as a tollgate slot is.
#[repr(align(64))]
struct Line(AtomicU64);

#[inline]
fn cas_once(a: &AtomicU64) -> bool {
    let cur = a.load(Ordering::Relaxed);
    a.compare_exchange(
        cur,
        cur.wrapping_add(1),
        Ordering::AcqRel,
        Ordering::Relaxed,
    )
    .is_ok()
}

mod single_threaded {
    use super::*;

    pub fn hot_key(c: &mut Criterion) {
        let mut g = c.benchmark_group("hot_key");
        g.throughput(Throughput::Elements(1));
        let (tenant, principal, joined) = names(42);

        let (l, class) = tollgate_limiter(1 << 16);
        g.bench_function("tollgate_admit", |b| {
            b.iter(|| {
                let k =
                    Key::authenticated(black_box(&tenant), black_box(&principal), class).unwrap();
                black_box(l.admit(&k))
            })
        });

        let pin = l.pin(&Key::authenticated(&tenant, &principal, class).unwrap());
        g.bench_function("tollgate_admit_pinned", |b| {
            b.iter(|| black_box(l.admit_pinned(black_box(&pin))))
        });

        let keyed: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(quota());
        g.bench_function("governor_keyed", |b| {
            b.iter(|| black_box(keyed.check_key(black_box(&joined))))
        });

        let direct: DefaultDirectRateLimiter = RateLimiter::direct(quota());
        g.bench_function("governor_direct", |b| b.iter(|| black_box(direct.check())));

        let line = Line(AtomicU64::new(0));
        g.bench_function("floor_cas_padded_slot", |b| {
            b.iter(|| black_box(cas_once(&line.0)))
        });

        let clock = tollgate::quanta::Clock::new();
        g.bench_function("floor_cas_plus_now", |b| {
            b.iter(|| {
                black_box(clock.raw());
                black_box(cas_once(&line.0))
            })
        });
        g.bench_function("part_quanta_now", |b| b.iter(|| black_box(clock.now())));
        let hasher = ahash::RandomState::with_seeds(1, 2, 3, 4);
        g.bench_function("part_ahash_25_bytes", |b| {
            b.iter(|| black_box(hasher.hash_one(black_box(&joined))))
        });
        g.finish();
    }

    /// What shared capacity and tenant fair share add to a hot-key admit (same run).
    pub fn fairness(c: &mut Criterion) {
        let mut g = c.benchmark_group("fairness");
        g.throughput(Throughput::Elements(1));
        let (tenant, principal, _) = names(42);
        // 16M slots per 100 ms: never refused at any speed this machine reaches.
        let shared = "shared_capacity:\n  shards: 8\n  window: 100ms\n  slots_per_window: 16777215\n  tenant_share: 1\n";
        for (label, extra) in [("without_capacity", ""), ("with_capacity", shared)] {
            let (l, class) = tollgate_limiter_with(1 << 16, extra);
            g.bench_function(BenchmarkId::new("tollgate_admit", label), |b| {
                b.iter(|| {
                    let k = Key::authenticated(black_box(&tenant), black_box(&principal), class)
                        .unwrap();
                    black_box(l.admit(&k))
                })
            });
        }
        g.finish();
    }

    /// 1,000,000 identities' keys in one arena of 32-byte records (tenant, principal), so that
    /// both limiters read a key with one random memory access, as a server reading it from a
    /// request would, and neither pays for scattered `String` allocations.
    fn key_arena(keys: usize) -> &'static [u8] {
        let mut bytes = Vec::with_capacity(keys * 32);
        for i in 0..keys {
            let (t, p, _) = names(i);
            let start = bytes.len();
            bytes.extend_from_slice(t.as_bytes()); // 10 bytes
            bytes.extend_from_slice(p.as_bytes()); // 14 bytes
            bytes.resize(start + 32, 0);
        }
        Box::leak(bytes.into_boxed_slice())
    }

    fn record(arena: &'static [u8], i: usize) -> (&'static str, &'static str, &'static str) {
        let r = &arena[i * 32..i * 32 + 24];
        let s = |b| std::str::from_utf8(b).expect("ascii");
        (s(&r[..10]), s(&r[10..]), s(r))
    }

    pub fn random_keys(c: &mut Criterion) {
        const KEYS: usize = 1_000_000;
        let mut g = c.benchmark_group("random_1m_keys");
        g.throughput(Throughput::Elements(1));
        g.sample_size(30);
        let arena = key_arena(KEYS);
        // The random order is drawn before timing; the loop only walks it.
        let mut rng = SmallRng::seed_from_u64(7);
        let order: Vec<u32> = (0..1 << 22)
            .map(|_| rng.gen_range(0..KEYS as u32))
            .collect();

        // Twice as many slots as keys: open addressing wants head room (see `docs/guide/performance.md`). Real
        // quotas (the example profile's `read`): each key is hit a few times a second here, so
        // every call is admitted and no identity is ever full (a full one could be reclaimed,
        // which the huge hot-key quotas would cause at once).
        let profile = Profile::from_yaml(&format!(
            "name: bench\nidentities: {{ capacity: {} }}\nroute_classes:\n  read:\n    \
             burst: {{ tokens: 50, per: 1s }}\n    sustained: {{ tokens: 6000, per: 1h }}\n",
            2 * KEYS
        ))
        .unwrap();
        let l = Limiter::builder(profile).build().unwrap();
        let class = l.route_class("read").unwrap();
        for i in 0..KEYS {
            let (t, p, _) = record(arena, i);
            l.admit(&Key::authenticated(t, p, class).unwrap());
        }
        g.bench_function(BenchmarkId::new("tollgate_admit", KEYS), |b| {
            let mut i = 0;
            b.iter(|| {
                let (t, p, _) = record(arena, order[i & (order.len() - 1)] as usize);
                i += 1;
                black_box(l.admit(&Key::authenticated(t, p, class).unwrap()))
            })
        });
        drop(l);

        let keyed: DefaultKeyedRateLimiter<&'static str> =
            RateLimiter::keyed(Quota::per_second(NonZeroU32::new(50).unwrap()));
        for i in 0..KEYS {
            let _ = keyed.check_key(&record(arena, i).2);
        }
        g.bench_function(BenchmarkId::new("governor_keyed", KEYS), |b| {
            let mut i = 0;
            b.iter(|| {
                let (_, _, j) = record(arena, order[i & (order.len() - 1)] as usize);
                i += 1;
                black_box(keyed.check_key(&j))
            })
        });
        drop(keyed);

        // The floor: one CAS on a random line of a 64 MiB array (larger than any cache here).
        let lines: Vec<Line> = (0..(64 << 20) / 64)
            .map(|_| Line(AtomicU64::new(0)))
            .collect();
        let line_order: Vec<u32> = (0..1 << 22)
            .map(|_| rng.gen_range(0..lines.len() as u32))
            .collect();
        g.bench_function(BenchmarkId::new("floor_cas_random_line_64MiB", KEYS), |b| {
            let mut i = 0;
            b.iter(|| {
                let a = &lines[line_order[i & (line_order.len() - 1)] as usize].0;
                i += 1;
                black_box(cas_once(a))
            })
        });
        drop(lines);
        // The same floor at the table's size (2M lines, 128 MiB), with the key record read
        // first: the memory traffic an admit cannot avoid.
        let lines: Vec<Line> = (0..2 * KEYS).map(|_| Line(AtomicU64::new(0))).collect();
        g.bench_function(
            BenchmarkId::new("floor_key_read_and_cas_128MiB", KEYS),
            |b| {
                let mut i = 0;
                b.iter(|| {
                    let (t, p, _) = record(arena, order[i & (order.len() - 1)] as usize);
                    let h = (t.len() as u64
                        ^ u64::from(t.as_bytes()[9]) << 8
                        ^ u64::from(p.as_bytes()[13]) << 16)
                        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                        ^ line_order[i & (line_order.len() - 1)] as u64;
                    i += 1;
                    black_box(cas_once(&lines[(h % lines.len() as u64) as usize].0))
                })
            },
        );
        g.finish();
    }
}

mod multi_threaded {
    use super::*;

    /// `iters` calls split over `threads` threads; wall time of the whole.
    fn run_threads(threads: usize, iters: u64, f: impl Fn(usize, u64) + Sync) -> Duration {
        let start = Instant::now();
        std::thread::scope(|s| {
            for t in 0..threads {
                let f = &f;
                s.spawn(move || f(t, iters / threads as u64));
            }
        });
        start.elapsed()
    }

    pub fn two_threads(c: &mut Criterion) {
        let mut g = c.benchmark_group("two_threads");
        g.throughput(Throughput::Elements(1));
        let (l, class) = tollgate_limiter(1 << 16);
        let keys: Vec<(String, String, String)> = (0..2).map(names).collect();
        let keyed: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(quota());

        for (label, distinct) in [("distinct_keys", true), ("one_key", false)] {
            g.bench_function(BenchmarkId::new("tollgate_admit", label), |b| {
                b.iter_custom(|iters| {
                    run_threads(2, iters, |t, n| {
                        let (tn, p, _) = &keys[if distinct { t } else { 0 }];
                        for _ in 0..n {
                            black_box(l.admit(&Key::authenticated(tn, p, class).unwrap()));
                        }
                    })
                })
            });
            g.bench_function(BenchmarkId::new("governor_keyed", label), |b| {
                b.iter_custom(|iters| {
                    run_threads(2, iters, |t, n| {
                        let (_, _, j) = &keys[if distinct { t } else { 0 }];
                        for _ in 0..n {
                            let _ = black_box(keyed.check_key(j));
                        }
                    })
                })
            });
        }
        g.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = single_threaded::hot_key, single_threaded::fairness, single_threaded::random_keys, multi_threaded::two_threads
}
criterion_main!(benches);
