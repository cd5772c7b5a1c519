//! The limiter against the reference model, on quanta's mock clock: (1) same decisions for
//! random sequences of clock moves and admits, (2) no bucket ever admits more than
//! `tokens + floor(elapsed * tokens / per)` in any interval, (3) retrying at exactly
//! `retry_after` is admitted and one microsecond earlier is not.

use tollgate_testkit as common;

use std::time::Duration;

use common::{mock_limiter, profile, ClassSpec, Model};
use proptest::prelude::*;
use tollgate::{Decision, Key};

const KEYS: [&str; 3] = ["alice", "bob", "carol"];

#[derive(Clone, Debug)]
enum Step {
    Advance(u64),
    Admit { key: usize, class: usize },
}

fn spec() -> impl Strategy<Value = ClassSpec> {
    (1u64..6, 1u64..2_000, 1u64..30, 1u64..120_000)
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        // Mostly small moves (within one burst period), some large ones.
        3 => (0u64..50_000_000).prop_map(Step::Advance),
        1 => (0u64..200_000_000_000).prop_map(Step::Advance),
        8 => (0..KEYS.len(), 0..2usize).prop_map(|(key, class)| Step::Admit { key, class }),
    ]
}

const MANY: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];

fn step_many() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u64..50_000_000).prop_map(Step::Advance),
        1 => (0u64..20_000_000_000).prop_map(Step::Advance),
        8 => (0..MANY.len(), 0..2usize).prop_map(|(key, class)| Step::Admit { key, class }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// (1) and (2) on one run.
    #[test]
    fn decisions_match_the_model_and_respect_the_bound(
        specs in [spec(), spec()],
        steps in proptest::collection::vec(step(), 1..300),
    ) {
        let (limiter, mock) = mock_limiter(profile(64, &specs));
        let classes = [limiter.route_class("c0").unwrap(), limiter.route_class("c1").unwrap()];
        let mut model = Model::default();
        let mut now = 0u64;
        // Admission times per (key, class).
        let mut admitted: std::collections::HashMap<(usize, usize), Vec<u64>> = Default::default();
        for s in &steps {
            match *s {
                Step::Advance(ns) => {
                    mock.increment(Duration::from_nanos(ns));
                    now += ns;
                }
                Step::Admit { key, class } => {
                    let k = Key::authenticated("tenant", KEYS[key], classes[class]).unwrap();
                    let got = limiter.admit(&k);
                    let want = model.admit(KEYS[key], class, specs[class], now);
                    prop_assert_eq!(got, want, "key {} class {} at {}", KEYS[key], class, now);
                    if got == Decision::Admit {
                        admitted.entry((key, class)).or_default().push(now);
                    }
                }
            }
        }
        for ((_, class), times) in &admitted {
            let (bt, bp, st, sp) = specs[*class];
            for (tokens, per_ms) in [(bt, bp), (st, sp)] {
                let per = u128::from(per_ms) * 1_000_000;
                for i in 0..times.len() {
                    for j in i..times.len() {
                        let elapsed = u128::from(times[j] - times[i]);
                        let bound = u128::from(tokens) + elapsed * u128::from(tokens) / per;
                        prop_assert!((j - i + 1) as u128 <= bound,
                            "{} admissions in {} ns, bound {}", j - i + 1, elapsed, bound);
                    }
                }
            }
        }
    }

    /// A table far smaller than the identities: a slot is only ever reclaimed from an identity
    /// whose buckets are both full (so no live state is lost), and `TableFull` comes exactly
    /// when every slot holds an identity that is not full.
    #[test]
    fn small_table_reclaims_only_full_slots(
        specs in [spec(), spec()],
        steps in proptest::collection::vec(step_many(), 1..300),
    ) {
        const CAPACITY: usize = 4;
        // One tenant that may hold the whole table (the default share is half of it).
        let mut p = profile(CAPACITY as u64, &specs);
        p.identities.tenant_share = tollgate::profile::Share::new(1.0).unwrap();
        let (limiter, mock) = mock_limiter(p);
        let classes = [limiter.route_class("c0").unwrap(), limiter.route_class("c1").unwrap()];
        let mut model = Model::default();
        let mut now = 0u64;
        for s in &steps {
            match *s {
                Step::Advance(ns) => {
                    mock.increment(Duration::from_nanos(ns));
                    now += ns;
                }
                Step::Admit { key, class } => {
                    let name = MANY[key];
                    let k = Key::authenticated("tenant", name, classes[class]).unwrap();
                    let got = limiter.admit(&k);
                    let table_full = model.is_full(name, class, now)
                        && model.busy_identities(now, (name, class)) >= CAPACITY;
                    if table_full {
                        prop_assert_eq!(got, Decision::Unavailable {
                            retry_after: None, cause: tollgate::Cause::TableFull });
                    } else {
                        let want = model.admit(name, class, specs[class], now);
                        prop_assert_eq!(got, want, "{} class {} at {}", name, class, now);
                    }
                }
            }
        }
    }

    /// (3) Retry-After is exact to the nanosecond, so in particular to the microsecond.
    #[test]
    fn retrying_at_retry_after_is_admitted(
        spec in spec(),
        warmup in proptest::collection::vec(0u64..5_000_000, 0..40),
    ) {
        let (limiter, mock) = mock_limiter(profile(16, &[spec]));
        let k = Key::authenticated("t", "p", limiter.route_class("c0").unwrap()).unwrap();
        for ns in warmup {
            mock.increment(Duration::from_nanos(ns));
            limiter.admit(&k);
        }
        // Drain until throttled.
        let wait = loop {
            match limiter.admit(&k) {
                Decision::Admit => continue,
                Decision::Throttle { retry_after, .. } => break retry_after,
                other => return Err(TestCaseError::fail(format!("{other:?}"))),
            }
        };
        prop_assert!(wait > Duration::ZERO);
        let early = wait.saturating_sub(Duration::from_micros(1));
        mock.increment(early);
        prop_assert!(!limiter.admit(&k).is_admit(), "admitted 1us before {:?}", wait);
        prop_assert_eq!(limiter.peek(&k).retry_after(), Some(wait - early));
        // Exact to the nanosecond: 1 ns early is still refused.
        mock.increment(wait - early - Duration::from_nanos(1));
        prop_assert!(!limiter.admit(&k).is_admit(), "admitted 1ns before {:?}", wait);
        mock.increment(Duration::from_nanos(1));
        prop_assert_eq!(limiter.peek(&k), Decision::Admit);
        prop_assert_eq!(limiter.admit(&k), Decision::Admit);
    }
}

#[test]
fn idle_identity_refills_to_exactly_full() {
    let (limiter, mock) = mock_limiter(profile(16, &[(3, 1_000, 10, 60_000)]));
    let k = Key::authenticated("t", "p", limiter.route_class("c0").unwrap()).unwrap();
    for _ in 0..3 {
        assert_eq!(limiter.admit(&k), Decision::Admit);
    }
    assert!(!limiter.admit(&k).is_admit());
    // A long idle: both buckets full, and not fuller.
    mock.increment(Duration::from_secs(3600));
    for _ in 0..3 {
        assert_eq!(limiter.admit(&k), Decision::Admit);
    }
    let d = limiter.admit(&k);
    assert_eq!(
        d,
        Decision::Throttle {
            retry_after: Duration::from_nanos(333_333_334),
            bucket: tollgate::BucketKind::Burst
        }
    );
}

/// Weighted cost against the model: mixed `n` (0, within the buckets, above them, `u32::MAX`),
/// optional shared capacity, and `admit_all` over several keys.
mod weighted {
    use super::*;
    use common::{profile_with_capacity, ModelCapacity};

    #[derive(Clone, Debug)]
    enum WStep {
        Advance(u64),
        AdmitN { key: usize, class: usize, n: u32 },
        AdmitAll(Vec<(usize, usize, u32)>),
    }

    /// Costs around the buckets' sizes (specs keep tokens below 30), 0, and the largest.
    fn cost() -> impl Strategy<Value = u32> + Clone {
        prop_oneof![
            2 => Just(0u32),
            6 => 1u32..8,
            2 => 8u32..40,
            1 => Just(u32::MAX),
        ]
    }

    fn wstep() -> impl Strategy<Value = WStep> {
        let item = (0..KEYS.len(), 0..2usize, cost());
        prop_oneof![
            3 => (0u64..50_000_000).prop_map(WStep::Advance),
            1 => (0u64..200_000_000_000).prop_map(WStep::Advance),
            8 => item.clone().prop_map(|(key, class, n)| WStep::AdmitN { key, class, n }),
            2 => proptest::collection::vec(item, 1..4).prop_map(WStep::AdmitAll),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Same decisions as the model for every step, with or without shared capacity (one
        /// shard of `slots` per window, so capacity refusals and their refunds happen often);
        /// admissions, counted in tokens, respect the bucket bound.
        #[test]
        fn weighted_decisions_match_the_model(
            specs in [spec(), spec()],
            capacity in proptest::option::of((1u64..2_000, 1u64..40)),
            steps in proptest::collection::vec(wstep(), 1..200),
        ) {
            let p = match capacity {
                Some((window_ms, slots)) => profile_with_capacity(64, &specs, window_ms, slots),
                None => profile(64, &specs),
            };
            let (limiter, mock) = mock_limiter(p);
            let classes = [limiter.route_class("c0").unwrap(), limiter.route_class("c1").unwrap()];
            let mut model = Model::default();
            model.capacity = capacity.map(|(w, s)| ModelCapacity::new(w * 1_000_000, s));
            let mut now = 0u64;
            // (time, tokens) of each admission per (key, class).
            let mut admitted: std::collections::HashMap<(usize, usize), Vec<(u64, u64)>> =
                Default::default();
            for s in &steps {
                match s {
                    WStep::Advance(ns) => {
                        mock.increment(Duration::from_nanos(*ns));
                        now += ns;
                    }
                    &WStep::AdmitN { key, class, n } => {
                        let k = Key::authenticated("tenant", KEYS[key], classes[class]).unwrap();
                        let got = limiter.admit_n(&k, n);
                        let want = model.admit_n(KEYS[key], class, specs[class], now, n);
                        prop_assert_eq!(got, want, "{} class {} n {} at {}", KEYS[key], class, n, now);
                        if got.is_admit() && n > 0 {
                            admitted.entry((key, class)).or_default().push((now, n.into()));
                        }
                    }
                    WStep::AdmitAll(items) => {
                        let keys: Vec<_> = items
                            .iter()
                            .map(|&(key, class, n)| {
                                (Key::authenticated("tenant", KEYS[key], classes[class]).unwrap(), n)
                            })
                            .collect();
                        let named: Vec<_> = items.iter().map(|&(k, c, n)| (KEYS[k], c, n)).collect();
                        let got = limiter
                            .admit_all(&keys)
                            .map_err(|r| (r.index, r.decision));
                        let want = model.admit_all(&named, &specs, now);
                        prop_assert_eq!(got, want, "{:?} at {}", items, now);
                        if got.is_ok() {
                            for &(key, class, n) in items.iter().filter(|i| i.2 > 0) {
                                admitted.entry((key, class)).or_default().push((now, n.into()));
                            }
                        }
                    }
                }
            }
            for ((_, class), times) in &admitted {
                let (bt, bp, st, sp) = specs[*class];
                for (tokens, per_ms) in [(bt, bp), (st, sp)] {
                    let per = u128::from(per_ms) * 1_000_000;
                    for i in 0..times.len() {
                        let mut spent = 0u128;
                        for j in i..times.len() {
                            spent += u128::from(times[j].1);
                            let elapsed = u128::from(times[j].0 - times[i].0);
                            let bound = u128::from(tokens) + elapsed * u128::from(tokens) / per;
                            prop_assert!(spent <= bound,
                                "{} tokens admitted in {} ns, bound {}", spent, elapsed, bound);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn admit_n_of_one_is_admit() {
        let specs = [(3, 1_000, 10, 60_000)];
        let (a, ma) = mock_limiter(profile(16, &specs));
        let (b, mb) = mock_limiter(profile(16, &specs));
        let ka = Key::authenticated("t", "p", a.route_class("c0").unwrap()).unwrap();
        let kb = Key::authenticated("t", "p", b.route_class("c0").unwrap()).unwrap();
        for step in 0..40u64 {
            ma.increment(Duration::from_millis(step * 37 % 400));
            mb.increment(Duration::from_millis(step * 37 % 400));
            assert_eq!(a.admit(&ka), b.admit_n(&kb, 1), "step {step}");
        }
    }

    #[test]
    fn a_cost_no_bucket_holds_is_refused_apart_and_charges_nothing() {
        let (l, _mock) = mock_limiter(profile(16, &[(3, 1_000, 10, 60_000)]));
        let k = Key::authenticated("t", "p", l.route_class("c0").unwrap()).unwrap();
        let burst = Decision::Exceeds {
            bucket: tollgate::BucketKind::Burst,
        };
        assert_eq!(l.admit_n(&k, 4), burst);
        assert_eq!(
            l.admit_n(&k, 11),
            burst,
            "both too small: the smaller bucket is named"
        );
        assert_eq!(l.admit_n(&k, u32::MAX), burst, "n * t overflows nothing");
        assert_eq!(burst.retry_after(), None);
        assert_eq!(burst.http_status(), 429);
        assert_eq!(l.remaining(&k).burst, 3, "nothing charged");
        assert_eq!(l.admit_n(&k, 3), Decision::Admit);
        assert_eq!(l.remaining(&k).burst, 0);
        // A sustained bucket smaller than the burst is named when only it is too small.
        let (l, _mock) = mock_limiter(profile(16, &[(10, 1_000, 5, 60_000)]));
        let k = Key::authenticated("t", "p", l.route_class("c0").unwrap()).unwrap();
        assert_eq!(
            l.admit_n(&k, 6),
            Decision::Exceeds {
                bucket: tollgate::BucketKind::Sustained
            }
        );
    }

    #[test]
    fn zero_checks_without_charging() {
        let (l, mock) = mock_limiter(profile(16, &[(2, 1_000, 10, 60_000)]));
        let k = Key::authenticated("t", "p", l.route_class("c0").unwrap()).unwrap();
        for _ in 0..5 {
            assert_eq!(l.admit_n(&k, 0), Decision::Admit);
        }
        assert_eq!(l.remaining(&k).burst, 2);
        assert_eq!(l.admit_n(&k, 2), Decision::Admit);
        // Not even one token left: the check says so, with the exact wait for one token.
        let refused = l.admit_n(&k, 0);
        assert_eq!(refused, l.peek(&k));
        assert_eq!(refused.retry_after(), Some(Duration::from_millis(500)));
        mock.increment(Duration::from_millis(500));
        assert_eq!(l.admit_n(&k, 0), Decision::Admit);
        assert_eq!(l.admit_n(&k, 1), Decision::Admit);
    }

    #[test]
    fn admit_all_refunds_tokens_and_capacity_slots_exactly() {
        // 4 slots a window for the one tenant; buckets far larger.
        let specs = [(100, 1_000, 1_000, 60_000)];
        let (l, _mock) = mock_limiter(profile_with_capacity(64, &specs, 1_000, 4));
        let c = l.route_class("c0").unwrap();
        let a = Key::authenticated("t", "a", c).unwrap();
        let b = Key::authenticated("t", "b", c).unwrap();
        // 3 slots for a, then 2 for b do not fit: a's 3 tokens and 3 slots come back.
        let refused = l.admit_all(&[(a, 3), (b, 2)]).unwrap_err();
        assert_eq!(refused.index, 1);
        assert!(matches!(
            refused.decision,
            Decision::Unavailable {
                cause: tollgate::Cause::TenantShare,
                retry_after: Some(_)
            }
        ));
        assert_eq!(l.remaining(&a).burst, 100, "a's tokens given back");
        // All 4 slots are there again.
        assert_eq!(l.admit_all(&[(a, 2), (b, 2)]), Ok(()));
        assert!(!l.admit_n(&a, 1).is_admit());
        // A cost above a whole window's slots: no made-up wait.
        assert!(matches!(
            l.admit_n(&b, 5),
            Decision::Unavailable {
                retry_after: None,
                ..
            }
        ));
        assert_eq!(l.admit_all(&[]), Ok(()));
    }
}
