//! Reloads keep every TAT exactly as it is (no clamp): regression tests for break B1 (a reload
//! to a smaller bucket clamped the debt, the way back granted it again) and a property test of
//! the bound over random reload sequences, on quanta's mock clock, plus one bounded run on the
//! real clock.
//!
//! The bound (see `Limiter::reload`): each admission costs its bucket's emission interval `t`
//! under the profile that decided it; from the admission at `s_i` to the one at `s_j`, those
//! costs add up to at most `(s_j - s_i) + tau` of the profile that decided the last one. With
//! one emission interval among the profiles, that is `tokens_max + (s_j - s_i) / t` admissions.

use tollgate_testkit as common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{mock_limiter, profile, ClassSpec};
use proptest::prelude::*;
use tollgate::{BucketKind, Decision, Key, Limiter, Profile};

/// Burst `tokens` per `per_ms`; a sustained bucket that never binds here.
fn burst_only(tokens: u64, per_ms: u64) -> Profile {
    profile(64, &[(tokens, per_ms, 4_000_000, 1_000)])
}

/// Admits `key` until the first refusal; returns how many were admitted and that refusal.
fn drain(l: &Limiter, key: &Key<'_>) -> (u64, Decision) {
    let mut n = 0;
    loop {
        match l.admit(key) {
            Decision::Admit => n += 1,
            refused => return (n, refused),
        }
    }
}

/// B1 as measured on the old main: at one instant, burst 200/2s and 100/1s alternately,
/// admitted 200, 0, 100, 0, 100 (400 where either profile allows 200). The debt of 2 s taken
/// under 200/2s now carries over whole: nothing more at that instant, and the Retry-After under
/// 100/1s is the exact time to pay it down to one token (2 s + 10 ms - 1 s).
#[test]
fn b1_reload_round_trip_does_not_forgive_debt() {
    let (big, small) = (burst_only(200, 2_000), burst_only(100, 1_000));
    let (l, mock) = mock_limiter(big.clone());
    let k = Key::authenticated("acme", "alice", l.route_class("c0").unwrap()).unwrap();
    let mut counts = vec![drain(&l, &k).0];
    for round in 0..4 {
        let p = if round % 2 == 0 { &small } else { &big };
        l.reload(p.clone()).unwrap();
        let (n, refused) = drain(&l, &k);
        counts.push(n);
        let want = if round % 2 == 0 { 1_010 } else { 10 };
        assert_eq!(
            refused,
            Decision::Throttle {
                retry_after: Duration::from_millis(want),
                bucket: BucketKind::Burst
            },
            "round {round}"
        );
    }
    assert_eq!(
        counts,
        [200, 0, 0, 0, 0],
        "admitted per profile at one instant"
    );
    // Under 100/1s the caller waits the debt out: 1.01 s, then one token per 10 ms.
    l.reload(small).unwrap();
    mock.increment(Duration::from_millis(1_010) - Duration::from_nanos(1));
    assert!(!l.admit(&k).is_admit());
    mock.increment(Duration::from_nanos(1));
    assert!(l.admit(&k).is_admit());
    assert!(!l.admit(&k).is_admit());
}

/// B1 the other way round: a full big bucket shrunk and grown back at one instant admits what
/// the big one holds, never the sum.
#[test]
fn b1_shrink_then_grow_admits_at_most_the_larger_bucket() {
    let (big, small) = (burst_only(200, 2_000), burst_only(100, 1_000));
    let (l, _mock) = mock_limiter(small.clone());
    let k = Key::authenticated("acme", "bob", l.route_class("c0").unwrap()).unwrap();
    let mut total = drain(&l, &k).0;
    for p in [&big, &small, &big, &small, &big] {
        l.reload(p.clone()).unwrap();
        total += drain(&l, &k).0;
    }
    assert_eq!(total, 200);
}

/// A refusal writes nothing, after a reload too: peeking, refused admits and `remaining` under
/// a smaller bucket leave the debt as it was, so growing the bucket back gives back exactly
/// what the bigger bucket had left.
#[test]
fn b1_refusals_under_a_smaller_bucket_write_nothing() {
    let (big, small) = (burst_only(10, 1_000), burst_only(2, 200));
    let (l, _mock) = mock_limiter(big.clone());
    let k = Key::authenticated("acme", "carol", l.route_class("c0").unwrap()).unwrap();
    for _ in 0..6 {
        assert!(l.admit(&k).is_admit());
    }
    // 600 ms owed; the small bucket holds 200 ms: empty, and it stays so.
    l.reload(small).unwrap();
    for _ in 0..5 {
        assert!(!l.admit(&k).is_admit());
        assert!(!l.peek(&k).is_admit());
        assert_eq!(l.remaining(&k).burst, 0);
    }
    l.reload(big).unwrap();
    assert_eq!(l.remaining(&k).burst, 4);
    assert_eq!(drain(&l, &k).0, 4);
}

#[derive(Clone, Debug)]
enum Step {
    Advance(u64),
    Admit,
    Reload(usize),
}

fn step(profiles: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u64..30_000_000).prop_map(Step::Advance),
        1 => (0u64..3_000_000_000).prop_map(Step::Advance),
        8 => Just(Step::Admit),
        3 => (0..profiles).prop_map(Step::Reload),
    ]
}

/// Three profiles with one emission interval for each bucket: `k * tokens` per `k * per`.
fn same_rate() -> impl Strategy<Value = Vec<ClassSpec>> {
    (
        (1u64..6, 1u64..400),
        (1u64..10, 1u64..4_000),
        [1u64..5, 1u64..5, 1u64..5],
    )
        .prop_map(|((bt, bp), (st, sp), ks)| {
            ks.iter()
                .map(|k| (k * bt, k * bp, k * st, k * sp))
                .collect()
        })
}

/// Three profiles with any rates.
fn any_rate() -> impl Strategy<Value = Vec<ClassSpec>> {
    proptest::collection::vec((1u64..20, 1u64..2_000, 1u64..40, 1u64..20_000), 3)
}

/// `(t, tau)` in ns of a bucket of `tokens` per `per_ms`, as the limiter computes them.
fn rate(tokens: u64, per_ms: u64) -> (u128, u128) {
    let t = (per_ms * 1_000_000).div_ceil(tokens);
    (u128::from(t), u128::from(t * tokens))
}

/// Runs `steps` on one identity; returns per admission (time, burst (t, tau), sustained (t,
/// tau)) of the profile that decided it.
fn run(specs: &[ClassSpec], steps: &[Step]) -> Vec<(u64, [(u128, u128); 2])> {
    let profiles: Vec<Profile> = specs.iter().map(|s| profile(64, &[*s])).collect();
    let (l, mock) = mock_limiter(profiles[0].clone());
    let k = Key::authenticated("acme", "alice", l.route_class("c0").unwrap()).unwrap();
    let (mut now, mut current) = (0u64, 0usize);
    let mut admitted = Vec::new();
    for s in steps {
        match *s {
            Step::Advance(ns) => {
                mock.increment(Duration::from_nanos(ns));
                now += ns;
            }
            Step::Reload(p) => {
                l.reload(profiles[p].clone()).unwrap();
                current = p;
            }
            Step::Admit => {
                let d = l.admit(&k);
                if d.is_admit() {
                    let (bt, bp, st, sp) = specs[current];
                    admitted.push((now, [rate(bt, bp), rate(st, sp)]));
                } else {
                    // A refusal names the exact wait: the same request just before it is refused.
                    let Decision::Throttle { retry_after, .. } = d else {
                        panic!("{d:?}")
                    };
                    assert!(retry_after > Duration::ZERO);
                }
            }
        }
    }
    admitted
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Same rates: over every interval between two admissions, at most what the largest of the
    /// profiles allows alone, `tokens_max + floor(elapsed / t)`, in each bucket.
    #[test]
    fn reloads_between_profiles_of_one_rate_never_beat_the_largest(
        specs in same_rate(),
        steps in proptest::collection::vec(step(3), 1..300),
    ) {
        let admitted = run(&specs, &steps);
        let tokens_max = [
            specs.iter().map(|s| s.0).max().unwrap(),
            specs.iter().map(|s| s.2).max().unwrap(),
        ];
        for (b, tokens_max) in tokens_max.into_iter().enumerate() {
            let t = admitted.first().map_or(1, |a| a.1[b].0);
            for i in 0..admitted.len() {
                for j in i..admitted.len() {
                    let elapsed = u128::from(admitted[j].0 - admitted[i].0);
                    let bound = u128::from(tokens_max) + elapsed / t;
                    prop_assert!((j - i + 1) as u128 <= bound,
                        "bucket {}: {} admissions in {} ns, bound {}", b, j - i + 1, elapsed, bound);
                }
            }
        }
    }

    /// Any rates: the emission intervals of the admissions from `i` to `j` add up to at most
    /// the time between them plus the `tau` of the profile that decided the last one.
    #[test]
    fn reloads_between_any_profiles_respect_the_time_bound(
        specs in any_rate(),
        steps in proptest::collection::vec(step(3), 1..300),
    ) {
        let admitted = run(&specs, &steps);
        for b in 0..2 {
            for i in 0..admitted.len() {
                let mut cost = 0u128;
                for j in i..admitted.len() {
                    cost += admitted[j].1[b].0;
                    let bound = u128::from(admitted[j].0 - admitted[i].0) + admitted[j].1[b].1;
                    prop_assert!(cost <= bound,
                        "bucket {}: admissions {}..={} cost {} ns, bound {}", b, i, j, cost, bound);
                }
            }
        }
    }
}

/// B1 on the real clock, as measured on the old main (102,768 admitted in 10 s against a bound
/// of 1,200): one thread admits one identity as fast as it can while another reloads every
/// 5 ms between burst 100/1s and 200/2s (the same rate, 100/s). Bound over the run: the larger
/// bucket plus the rate, `200 + elapsed * 100/s`. Three seconds, to stay short.
#[test]
fn b1_reloading_every_5ms_on_the_real_clock_stays_within_the_bound() {
    let (a, b) = (burst_only(100, 1_000), burst_only(200, 2_000));
    let limiter = Arc::new(Limiter::builder(a.clone()).build().unwrap());
    let c = limiter.route_class("c0").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let admitter = {
        let (limiter, done) = (limiter.clone(), done.clone());
        std::thread::spawn(move || {
            let key = Key::authenticated("acme", "hot", c).unwrap();
            let mut admitted = 0u64;
            while !done.load(Ordering::Relaxed) {
                admitted += u64::from(limiter.admit(&key).is_admit());
            }
            admitted
        })
    };
    let mut reloads = 0u64;
    while start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(5));
        reloads += 1;
        let next = if reloads % 2 == 0 { &a } else { &b };
        limiter.reload(next.clone()).unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let admitted = admitter.join().unwrap();
    let elapsed = start.elapsed();
    let bound = 200 + elapsed.as_millis() as u64 / 10;
    eprintln!(
        "B1 real clock: {admitted} admitted in {elapsed:?} with {reloads} reloads; bound {bound}"
    );
    assert!(admitted <= bound, "{admitted} admitted, bound {bound}");
}
