//! Stress on real threads and the real clock, bounded in time (about 5 s for the hot key, a
//! bounded number of admits for the others): what the loom models prove for two or three
//! operations, checked here for millions.
//!
//! 1. Two threads on one hot identity: admitted <= tokens + floor(elapsed * tokens / per) for
//!    both buckets.
//! 2. Two threads over 100,000 identities with random route classes of the example profile:
//!    every identity within its buckets' bound, capacity refusals well-formed, never `TableFull`.
//! 3. The same while another thread reloads every 10 ms, alternating two profiles whose bursts
//!    differ: every decision is one of them could give (bound by the larger bucket, a wait no
//!    longer than the longer emission interval), and a bucket's admissions stay within the
//!    larger profile's bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tollgate::profile::Tokens;
use tollgate::{BucketKind, Cause, Decision, Key, Limiter, Profile};

/// The largest admissions a bucket of `tokens` per `per` allows in `elapsed`.
fn bound(tokens: u64, per: Duration, elapsed: Duration) -> u64 {
    tokens + (elapsed.as_nanos() * u128::from(tokens) / per.as_nanos()) as u64
}

#[test]
fn hot_identity_two_threads_respects_both_buckets() {
    let profile = Profile::from_yaml(
        "name: hot\nidentities: { capacity: 1024 }\nroute_classes:\n  c:\n    \
         burst: { tokens: 20, per: 100ms }\n    sustained: { tokens: 300, per: 10s }\n",
    )
    .unwrap();
    let start = Instant::now();
    let limiter = Arc::new(Limiter::builder(profile).build().unwrap());
    let c = limiter.route_class("c").unwrap();
    let run_for = Duration::from_secs(5);
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (limiter, barrier) = (limiter.clone(), barrier.clone());
            std::thread::spawn(move || {
                let key = Key::authenticated("acme", "hot", c).unwrap();
                barrier.wait();
                let (mut admitted, mut throttled) = (0u64, 0u64);
                while start.elapsed() < run_for {
                    let called = Instant::now();
                    let decision = limiter.admit(&key);
                    let took = called.elapsed();
                    match decision {
                        Decision::Admit => admitted += 1,
                        Decision::Throttle { retry_after, .. } => {
                            // At most one token's wait after this call's clock reading; a reading
                            // that went stale within the call (the thread preempted before its
                            // CAS) waits for the other thread's newer debt too, which is at most
                            // `took` newer.
                            assert!(
                                retry_after
                                    <= Duration::from_secs(10) / 300
                                        + took
                                        + Duration::from_millis(5),
                                "{retry_after:?} after a call of {took:?}"
                            );
                            throttled += 1
                        }
                        d => panic!("{d:?}"),
                    }
                }
                (admitted, throttled)
            })
        })
        .collect();
    let (admitted, throttled) = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let elapsed = start.elapsed();
    let burst = bound(20, Duration::from_millis(100), elapsed);
    let sustained = bound(300, Duration::from_secs(10), elapsed);
    eprintln!(
        "hot key: {admitted} admitted, {throttled} throttled in {elapsed:?}; bounds: burst \
         {burst}, sustained {sustained}"
    );
    assert!(admitted <= burst, "{admitted} > burst bound {burst}");
    assert!(
        admitted <= sustained,
        "{admitted} > sustained bound {sustained}"
    );
    // The sustained bucket is the binding one: its full credit is surely spent in 5 s.
    assert!(admitted >= 300, "only {admitted} admitted");
    assert!(throttled > 0);
}

/// Two threads on one hot identity while a third moves the (mock) clock in 5 ms steps: over
/// 200 ms at most `20 + 200 / 5 = 60` admissions. Regression test for the stale-clock clamp: a
/// throttled admit whose clock reading predates a concurrent admit's used to write its
/// "reload clamp" down and erase that admit's debt (it admitted 80 and more here). The clamp
/// is gone (a refusal writes nothing); this keeps checking that a stale reading never
/// over-admits.
#[test]
fn moving_clock_two_threads_never_over_admit() {
    let profile = Profile::from_yaml(
        "name: hot\nidentities: { capacity: 1024 }\nroute_classes:\n  c:\n    \
         burst: { tokens: 20, per: 100ms }\n    sustained: { tokens: 300, per: 10s }\n",
    )
    .unwrap();
    for round in 0..10 {
        let (clock, mock) = tollgate::quanta::Clock::mock();
        let limiter = Arc::new(
            Limiter::builder(profile.clone())
                .clock(clock)
                .build()
                .unwrap(),
        );
        let c = limiter.route_class("c").unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (limiter, done) = (limiter.clone(), done.clone());
                std::thread::spawn(move || {
                    let key = Key::authenticated("acme", "hot", c).unwrap();
                    let mut admitted = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        admitted += u64::from(limiter.admit(&key).is_admit());
                    }
                    admitted
                })
            })
            .collect();
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(1));
            mock.increment(Duration::from_millis(5));
        }
        done.store(true, Ordering::Relaxed);
        let admitted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(
            admitted <= 60,
            "round {round}: {admitted} admitted in 200 ms, bound 60"
        );
    }
}

fn example() -> Profile {
    Profile::from_path(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/profiles/example.yaml"
    ))
    .unwrap()
}

/// The example profile with every burst bucket's tokens multiplied by `factor` (through YAML,
/// so that it is validated like any profile).
fn example_with_burst_times(factor: u64) -> Profile {
    let mut p = example();
    for (_, c) in p.route_classes.iter_mut() {
        c.burst.tokens = Tokens::new(c.burst.tokens.get() * factor).unwrap();
    }
    Profile::from_yaml(&serde_yaml_ng::to_string(&p).unwrap()).unwrap()
}

const TENANTS: u64 = 100;
const PRINCIPALS: u64 = 1_000;
const ADMITS_PER_THREAD: usize = 200_000;

/// Per (tenant, principal, class): admitted count.
type Counts = HashMap<(u64, u64, usize), u64>;

/// Two threads admit random identities and classes; `reloads` runs beside them until they end.
/// Checks every decision with `check` and returns the merged counts and the elapsed time.
fn many_identities(
    limiter: Arc<Limiter>,
    check: impl Fn(usize, Decision) + Send + Sync + 'static,
    reloads: Option<Box<dyn FnMut() + Send>>,
) -> (Counts, Duration) {
    let names = ["read", "write", "registration", "expensive"];
    let classes: Vec<_> = names
        .iter()
        .map(|n| limiter.route_class(n).unwrap())
        .collect();
    let tenant_names: Arc<Vec<String>> =
        Arc::new((0..TENANTS).map(|t| format!("tenant-{t}")).collect());
    let check = Arc::new(check);
    let done = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let reloader = reloads.map(|mut reload| {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while !done.load(Ordering::Relaxed) {
                reload();
                n += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            n
        })
    });
    let threads: Vec<_> = (0..2)
        .map(|seed| {
            let (limiter, classes, tenants, check) = (
                limiter.clone(),
                classes.clone(),
                tenant_names.clone(),
                check.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed);
                let mut counts = Counts::new();
                let mut principal = String::new();
                for _ in 0..ADMITS_PER_THREAD {
                    let (t, p, c) = (
                        rng.gen_range(0..TENANTS),
                        rng.gen_range(0..PRINCIPALS),
                        rng.gen_range(0..classes.len()),
                    );
                    principal.clear();
                    principal.push_str(&format!("user-{p}"));
                    let key =
                        Key::authenticated(&tenants[t as usize], &principal, classes[c]).unwrap();
                    let d = limiter.admit(&key);
                    check(c, d);
                    if d.is_admit() {
                        *counts.entry((t, p, c)).or_default() += 1;
                    }
                }
                counts
            })
        })
        .collect();
    let mut counts = Counts::new();
    for t in threads {
        for (k, v) in t.join().unwrap() {
            *counts.entry(k).or_default() += v;
        }
    }
    done.store(true, Ordering::Relaxed);
    if let Some(r) = reloader {
        let n = r.join().unwrap();
        eprintln!("{n} reloads");
    }
    (counts, start.elapsed())
}

/// A capacity refusal names shard or tenant share and a wait within one window (1 s).
fn capacity_refusal_is_well_formed(d: Decision) {
    match d {
        Decision::Unavailable {
            cause: Cause::ShardFull | Cause::TenantShare,
            retry_after: Some(w),
        } => assert!(w <= Duration::from_secs(1), "{d:?}"),
        d => panic!("unexpected {d:?}"),
    }
}

/// (burst tokens, burst per, sustained tokens, sustained per) of each class, in handle order.
fn limits(p: &Profile) -> Vec<(u64, Duration, u64, Duration)> {
    ["read", "write", "registration", "expensive"]
        .iter()
        .map(|n| {
            let l = p.route_class(n).unwrap();
            (
                l.burst.tokens.get(),
                l.burst.per.get(),
                l.sustained.tokens.get(),
                l.sustained.per.get(),
            )
        })
        .collect()
}

#[test]
fn many_identities_two_threads_stay_within_their_buckets() {
    let profile = example();
    let lim = limits(&profile);
    let limiter = Arc::new(Limiter::builder(profile).build().unwrap());
    let lim2 = lim.clone();
    let (counts, elapsed) = many_identities(
        limiter,
        move |c, d| match d {
            Decision::Admit => {}
            Decision::Throttle {
                retry_after,
                bucket,
            } => {
                let (bt, bp, st, sp) = lim2[c];
                let t = match bucket {
                    BucketKind::Burst => bp.as_nanos().div_ceil(u128::from(bt)),
                    BucketKind::Sustained => sp.as_nanos().div_ceil(u128::from(st)),
                };
                assert!(retry_after.as_nanos() <= t, "{d:?} for class {c}");
            }
            d => capacity_refusal_is_well_formed(d),
        },
        None,
    );
    let admitted: u64 = counts.values().sum();
    eprintln!(
        "{} identities admitted, {admitted} admissions in {elapsed:?}",
        counts.len()
    );
    assert!(counts.len() > 10_000);
    for ((t, p, c), n) in counts {
        let (bt, bp, st, sp) = lim[c];
        assert!(n <= bound(bt, bp, elapsed), "{t}/{p} class {c}: {n}");
        assert!(n <= bound(st, sp, elapsed), "{t}/{p} class {c}: {n}");
    }
}

#[test]
fn many_identities_while_reloading_every_10ms() {
    let (a, b) = (example(), example_with_burst_times(3));
    let (la, lb) = (limits(&a), limits(&b));
    let limiter = Arc::new(Limiter::builder(a.clone()).build().unwrap());
    let reloads = {
        let (limiter, a, b) = (limiter.clone(), a.clone(), b.clone());
        let mut flip = false;
        Box::new(move || {
            flip = !flip;
            let next = if flip { b.clone() } else { a.clone() };
            limiter.reload(next.clone()).unwrap();
            assert!(*limiter.profile() == next);
        })
    };
    let (la2, lb2) = (la.clone(), lb.clone());
    let (counts, elapsed) = many_identities(
        limiter.clone(),
        move |c, d| match d {
            Decision::Admit => {}
            // A wait one of the two profiles can give. A reload carries debt in tokens, and no
            // bucket owes more tokens than the larger profile's holds (`tokens_max`), so under
            // a profile of `tokens` per `t` the wait is at most `(tokens_max - tokens + 1) * t`.
            Decision::Throttle {
                retry_after,
                bucket,
            } => {
                let tokens = |(bt, _, st, _): (u64, Duration, u64, Duration)| match bucket {
                    BucketKind::Burst => u128::from(bt),
                    BucketKind::Sustained => u128::from(st),
                };
                let max = tokens(la2[c]).max(tokens(lb2[c]));
                let ok = [la2[c], lb2[c]].iter().any(|&(bt, bp, st, sp)| {
                    let t = match bucket {
                        BucketKind::Burst => bp.as_nanos().div_ceil(u128::from(bt)),
                        BucketKind::Sustained => sp.as_nanos().div_ceil(u128::from(st)),
                    };
                    retry_after.as_nanos() <= (max - tokens((bt, bp, st, sp)) + 1) * t
                });
                assert!(ok, "{d:?} for class {c} fits neither profile");
            }
            d => capacity_refusal_is_well_formed(d),
        },
        Some(reloads),
    );
    eprintln!("{} identities admitted in {elapsed:?}", counts.len());
    for ((t, p, c), n) in counts {
        // The larger burst (profile b) and the common sustained bucket bound every identity.
        let (bt, bp, st, sp) = lb[c];
        assert!(n <= bound(bt, bp, elapsed), "{t}/{p} class {c}: {n}");
        assert!(n <= bound(st, sp, elapsed), "{t}/{p} class {c}: {n}");
        assert_eq!((st, sp), (la[c].2, la[c].3));
    }
    let p = limiter.profile();
    assert!(*p == a || *p == b);
}
