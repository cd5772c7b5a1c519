//! Reloads carry every bucket's debt over in tokens, never clamped: regression tests (a reload
//! to a smaller bucket must not clamp the debt, or the way back grants it again; a debt carried
//! in time would over-admit between profiles of different rates), property tests of the
//! bound and against the reference model over random reload sequences, on quanta's mock clock,
//! plus one bounded run on the real clock.
//!
//! The bound (see `Limiter::reload`): from the admission at `s_i` to the one at `s_j`, each
//! bucket admits at most `tokens_max + floor((s_j - s_i) / t_min)`, where `tokens_max` is the
//! largest bucket and `t_min` the shortest emission interval among the profiles in force at
//! some instant of `[s_i, s_j]`.

use tollgate_testkit as common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{mock_limiter, profile, ClassSpec, Model};
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

/// At one instant, burst 200/2s and 100/1s alternately: a clamping reload would admit 200, 0,
/// 100, 0, 100 (400 where either profile allows 200). The debt of 2 s taken
/// under 200/2s now carries over whole: nothing more at that instant, and the Retry-After under
/// 100/1s is the exact time to pay it down to one token (2 s + 10 ms - 1 s).
#[test]
fn a_reload_round_trip_does_not_forgive_debt() {
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

/// The other way round: a full big bucket shrunk and grown back at one instant admits what
/// the big one holds, never the sum.
#[test]
fn shrink_then_grow_admits_at_most_the_larger_bucket() {
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
fn refusals_under_a_smaller_bucket_write_nothing() {
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

/// The counter-example to carrying debt in time: A = 100/1s (t = 10 ms),
/// B = 100/10s (t = 100 ms). At one instant, 100 admitted under A left the TAT 1 s ahead,
/// which B read as 10 tokens owed, so 90 more were admitted: 190 where each profile allows 100.
/// In tokens, the 100 owed under A are 100 owed under B (10 s): nothing more, and B's
/// Retry-After is the exact time to pay them down to one token (10 s + 100 ms - 10 s).
#[test]
fn reload_to_a_slower_rate_carries_the_debt_in_tokens() {
    let (a, b) = (burst_only(100, 1_000), burst_only(100, 10_000));
    let (l, mock) = mock_limiter(a.clone());
    let k = Key::authenticated("acme", "dave", l.route_class("c0").unwrap()).unwrap();
    let (first, _) = drain(&l, &k);
    l.reload(b.clone()).unwrap();
    let (second, refused) = drain(&l, &k);
    eprintln!("counter-example: {first} under A, then {second} under B at one instant");
    assert_eq!((first, second), (100, 0), "190 when debt carried in time");
    assert_eq!(
        refused,
        Decision::Throttle {
            retry_after: Duration::from_millis(100),
            bucket: BucketKind::Burst
        }
    );
    // And back: the 100 tokens owed under B are 100 under A again (1 s), not 10 (100 ms).
    l.reload(a).unwrap();
    assert_eq!(drain(&l, &k).0, 0);
    mock.increment(Duration::from_millis(500));
    assert_eq!(drain(&l, &k).0, 50, "500 ms of A's rate");
    // Under B, 5 s pay back 50 of B's tokens.
    l.reload(b).unwrap();
    mock.increment(Duration::from_secs(5));
    assert_eq!(drain(&l, &k).0, 50);
}

/// Many reloads at one instant (more than the state word's four epoch tags, so the reload's
/// re-tag of the table runs) among profiles of different rates: what a key is admitted at one
/// instant is exactly the largest bucket among the profiles it drained under (a debt of `d`
/// tokens leaves `tokens - d` of a bucket), so every debt survives every conversion and walk.
#[test]
fn many_reloads_at_one_instant_admit_at_most_the_largest_bucket() {
    let tokens = [100, 10, 300, 7];
    let profiles = [
        burst_only(100, 1_000),
        burst_only(10, 10_000),
        burst_only(300, 600),
        burst_only(7, 70_000),
    ];
    let (l, _mock) = mock_limiter(profiles[0].clone());
    let keys: Vec<Key<'_>> = ["e", "f", "g"]
        .iter()
        .map(|p| Key::authenticated("acme", p, l.route_class("c0").unwrap()).unwrap())
        .collect();
    let (mut total, mut largest) = ([0u64; 3], [0u64; 3]);
    for round in 0..40 {
        let p = (round * 3 + 1) % 4;
        l.reload(profiles[p].clone()).unwrap();
        // Each key drains on some rounds only, so that words of every epoch tag stay behind.
        for (i, k) in keys.iter().enumerate() {
            if round % (i + 2) == 1 {
                total[i] += drain(&l, k).0;
                largest[i] = largest[i].max(tokens[p]);
            }
        }
    }
    assert_eq!(largest, [300, 300, 100], "the test drains under these");
    assert_eq!(total, largest, "admitted per key");
}

/// A reload that lists the classes in another order, and adds one in front, keeps every
/// handle, and the profile in force lists its classes in handle order: a class's position in
/// it (what the RLS server's rules and the HTTP answers read) is its handle, and each handle
/// keeps its own limits.
#[test]
fn a_reload_in_another_class_order_keeps_handles_and_positions_together() {
    let yaml = |classes: &[(&str, u64)]| {
        let mut y = "name: p\nidentities: { capacity: 64 }\nroute_classes:\n".to_owned();
        for (name, tokens) in classes {
            y += &format!(
                "  {name}:\n    burst: {{ tokens: {tokens}, per: 1h }}\n    \
                 sustained: {{ tokens: {tokens}, per: 1h }}\n"
            );
        }
        Profile::from_yaml(&y).unwrap()
    };
    let (l, _mock) = mock_limiter(yaml(&[("read", 3), ("write", 1)]));
    let (read, write) = (
        l.route_class("read").unwrap(),
        l.route_class("write").unwrap(),
    );
    l.reload(yaml(&[("added", 5), ("write", 1), ("read", 3)]))
        .unwrap();
    assert_eq!(l.route_class("read"), Some(read));
    assert_eq!(l.route_class("write"), Some(write));
    let profile = l.profile();
    let names: Vec<&str> = profile.route_classes.iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["read", "write", "added"]);
    for name in names {
        let handle = l.route_class(name).unwrap();
        assert_eq!(
            profile.route_classes.position(name),
            Some(handle.index() as usize)
        );
    }
    let admitted = |class| {
        let k = Key::authenticated("acme", "alice", class).unwrap();
        drain(&l, &k).0
    };
    assert_eq!(admitted(read), 3);
    assert_eq!(admitted(write), 1);
    assert_eq!(admitted(l.route_class("added").unwrap()), 5);
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

/// Four profiles with any rates and bursts.
fn any_rate() -> impl Strategy<Value = Vec<ClassSpec>> {
    proptest::collection::vec((1u64..20, 1u64..2_000, 1u64..40, 1u64..20_000), 4)
}

/// `(t, tau)` in ns of a bucket of `tokens` per `per_ms`, as the limiter computes them.
fn rate(tokens: u64, per_ms: u64) -> (u128, u128) {
    let t = (per_ms * 1_000_000).div_ceil(tokens);
    (u128::from(t), u128::from(t * tokens))
}

/// One admission: its time, the profile that decided it, and how many reloads came before it.
#[derive(Clone, Copy, Debug)]
struct Admitted {
    at: u64,
    profile: usize,
    reloads: usize,
}

/// Runs `steps` on one identity; returns its admissions and the profile of every reload.
fn run(specs: &[ClassSpec], steps: &[Step]) -> (Vec<Admitted>, Vec<usize>) {
    let profiles: Vec<Profile> = specs.iter().map(|s| profile(64, &[*s])).collect();
    let (l, mock) = mock_limiter(profiles[0].clone());
    let k = Key::authenticated("acme", "alice", l.route_class("c0").unwrap()).unwrap();
    let (mut now, mut current) = (0u64, 0usize);
    let (mut admitted, mut reloads) = (Vec::new(), Vec::new());
    for s in steps {
        match *s {
            Step::Advance(ns) => {
                mock.increment(Duration::from_nanos(ns));
                now += ns;
            }
            Step::Reload(p) => {
                l.reload(profiles[p].clone()).unwrap();
                current = p;
                reloads.push(p);
            }
            Step::Admit => {
                let d = l.admit(&k);
                if d.is_admit() {
                    admitted.push(Admitted {
                        at: now,
                        profile: current,
                        reloads: reloads.len(),
                    });
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
    (admitted, reloads)
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
        let (admitted, _) = run(&specs, &steps);
        let tokens_max = [
            specs.iter().map(|s| s.0).max().unwrap(),
            specs.iter().map(|s| s.2).max().unwrap(),
        ];
        for (b, tokens_max) in tokens_max.into_iter().enumerate() {
            let t = admitted.first().map_or(1, |a| {
                let (bt, bp, st, sp) = specs[a.profile];
                [rate(bt, bp), rate(st, sp)][b].0
            });
            for i in 0..admitted.len() {
                for j in i..admitted.len() {
                    let elapsed = u128::from(admitted[j].at - admitted[i].at);
                    let bound = u128::from(tokens_max) + elapsed / t;
                    prop_assert!((j - i + 1) as u128 <= bound,
                        "bucket {}: {} admissions in {} ns, bound {}", b, j - i + 1, elapsed, bound);
                }
            }
        }
    }

    /// Any rates and bursts (the reload rule): from admission `i` to admission `j`, each bucket
    /// admitted at most `tokens_max + floor((s_j - s_i) / t_min)`, over the profiles in force
    /// at some instant between them (the one that decided `i` and every one reloaded to up to
    /// `j`), `tokens_max` their largest bucket and `t_min` their shortest emission interval.
    #[test]
    fn reloads_between_any_profiles_never_beat_the_most_generous_in_force(
        specs in any_rate(),
        steps in proptest::collection::vec(step(4), 1..300),
    ) {
        let (admitted, reloads) = run(&specs, &steps);
        for b in 0..2 {
            let bucket = |p: usize| {
                let (bt, bp, st, sp) = specs[p];
                [(bt, rate(bt, bp).0), (st, rate(st, sp).0)][b]
            };
            for i in 0..admitted.len() {
                let (mut tokens_max, mut t_min) = bucket(admitted[i].profile);
                let mut seen = admitted[i].reloads;
                for j in i..admitted.len() {
                    for &p in &reloads[seen..admitted[j].reloads] {
                        let (tokens, t) = bucket(p);
                        (tokens_max, t_min) = (tokens_max.max(tokens), t_min.min(t));
                    }
                    seen = admitted[j].reloads;
                    let elapsed = u128::from(admitted[j].at - admitted[i].at);
                    let bound = u128::from(tokens_max) + elapsed / t_min;
                    prop_assert!((j - i + 1) as u128 <= bound,
                        "bucket {}: admissions {}..={}: {} in {} ns, bound {}",
                        b, i, j, j - i + 1, elapsed, bound);
                }
            }
        }
    }

    /// The limiter against the reference model (`testkit`'s, debt carried in tokens at each
    /// reload's instant) on three identities and two classes: every decision, the exact
    /// `Retry-After` and the bucket it names included, is the model's, across random reloads
    /// among four profiles (so the re-tag of the table runs too).
    #[test]
    fn reloads_match_the_model(
        specs in proptest::collection::vec([any_spec(), any_spec()], 4),
        steps in proptest::collection::vec(model_step(), 1..300),
    ) {
        let profiles: Vec<Profile> = specs.iter().map(|s| profile(64, s)).collect();
        let (l, mock) = mock_limiter(profiles[0].clone());
        let classes = [l.route_class("c0").unwrap(), l.route_class("c1").unwrap()];
        let mut model = Model::default();
        let (mut now, mut current) = (0u64, 0usize);
        for s in &steps {
            match *s {
                ModelStep::Advance(ns) => {
                    mock.increment(Duration::from_nanos(ns));
                    now += ns;
                }
                ModelStep::Reload(p) => {
                    l.reload(profiles[p].clone()).unwrap();
                    model.reload(&specs[p], now);
                    current = p;
                }
                ModelStep::Admit { key, class } => {
                    let k = Key::authenticated("acme", KEYS[key], classes[class]).unwrap();
                    let peeked = l.peek(&k);
                    let got = l.admit(&k);
                    let want = model.admit(KEYS[key], class, specs[current][class], now);
                    prop_assert_eq!(got, want, "{} class {} at {}", KEYS[key], class, now);
                    prop_assert_eq!(peeked, want, "peek");
                }
            }
        }
    }
}

const KEYS: [&str; 3] = ["alice", "bob", "carol"];

fn any_spec() -> impl Strategy<Value = ClassSpec> {
    (1u64..20, 1u64..2_000, 1u64..40, 1u64..20_000)
}

#[derive(Clone, Debug)]
enum ModelStep {
    Advance(u64),
    Admit { key: usize, class: usize },
    Reload(usize),
}

fn model_step() -> impl Strategy<Value = ModelStep> {
    prop_oneof![
        3 => (0u64..30_000_000).prop_map(ModelStep::Advance),
        1 => (0u64..3_000_000_000).prop_map(ModelStep::Advance),
        8 => (0..KEYS.len(), 0..2usize).prop_map(|(key, class)| ModelStep::Admit { key, class }),
        3 => (0usize..4).prop_map(ModelStep::Reload),
    ]
}

/// Reloads on the real clock stay within the bound: one thread admits one identity as fast as it can while another reloads every
/// 5 ms between burst 100/1s and 200/2s (the same rate, 100/s). Bound over the run: the larger
/// bucket plus the rate, `200 + elapsed * 100/s`. Three seconds, to stay short.
#[test]
fn reloading_every_5ms_on_the_real_clock_stays_within_the_bound() {
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
        "real clock: {admitted} admitted in {elapsed:?} with {reloads} reloads; bound {bound}"
    );
    assert!(admitted <= bound, "{admitted} admitted, bound {bound}");
}
