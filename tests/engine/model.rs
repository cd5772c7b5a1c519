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
