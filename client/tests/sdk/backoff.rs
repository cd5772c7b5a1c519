//! Backoff bounds and distributions over 10,000 seeded draws per jitter strategy.

use std::time::Duration;

use tollgate_client::{Backoff, Jitter};

const DRAWS: usize = 10_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn backoff(jitter: Jitter) -> Backoff {
    Backoff::new(ms(100), ms(5_000))
        .with_floor(ms(20))
        .with_jitter(jitter)
}

fn draws(b: &Backoff, retry: u32, seed: u64) -> Vec<Duration> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut prev = b.base();
    (0..DRAWS)
        .map(|_| {
            let d = b.delay(retry, prev, &mut rng);
            prev = d;
            d
        })
        .collect()
}

fn mean(v: &[Duration]) -> Duration {
    v.iter().sum::<Duration>() / v.len() as u32
}

#[test]
fn exponential_doubles_then_caps() {
    let b = backoff(Jitter::None);
    let want = [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000];
    for (retry, w) in want.iter().enumerate() {
        assert_eq!(b.exponential(retry as u32), ms(*w), "retry {retry}");
    }
    // No overflow far out.
    assert_eq!(b.exponential(63), ms(5_000));
    assert_eq!(b.exponential(u32::MAX), ms(5_000));
    assert_eq!(b.delay(3, ms(0), &mut fastrand::Rng::with_seed(1)), ms(800));
}

#[test]
fn every_jitter_stays_within_floor_and_cap() {
    for jitter in [
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
        Jitter::None,
    ] {
        let b = backoff(jitter);
        for retry in [0, 1, 3, 5, 6, 10, 40] {
            for d in draws(&b, retry, 7 + u64::from(retry)) {
                assert!(
                    d >= b.floor() && d <= b.cap(),
                    "{jitter:?} retry {retry}: {d:?} not in [{:?}, {:?}]",
                    b.floor(),
                    b.cap()
                );
            }
        }
    }
}

#[test]
fn full_jitter_mean_is_about_half_the_exponential() {
    let b = backoff(Jitter::Full);
    for retry in [2, 4] {
        let exp = b.exponential(retry);
        let v = draws(&b, retry, 42);
        let m = mean(&v).as_secs_f64();
        let half = exp.as_secs_f64() / 2.0;
        assert!(
            (m - half).abs() < half * 0.05,
            "retry {retry}: mean {m} vs {half}"
        );
        // Spread over the whole range, not clustered: both tails are reached.
        assert!(v.iter().any(|d| *d < exp / 10));
        assert!(v.iter().any(|d| *d > exp * 9 / 10));
        assert!(v.iter().all(|d| *d <= exp));
    }
}

#[test]
fn equal_jitter_keeps_at_least_half() {
    let b = backoff(Jitter::Equal);
    let retry = 3;
    let exp = b.exponential(retry);
    let v = draws(&b, retry, 9);
    assert!(v.iter().all(|d| *d >= exp / 2 && *d <= exp));
    let m = mean(&v).as_secs_f64();
    let want = exp.as_secs_f64() * 0.75;
    assert!((m - want).abs() < want * 0.05, "mean {m} vs {want}");
}

#[test]
fn decorrelated_jitter_grows_from_the_previous_delay() {
    let b = backoff(Jitter::Decorrelated);
    let mut rng = fastrand::Rng::with_seed(3);
    // First retry: random(base, 3 * base).
    for _ in 0..DRAWS {
        let d = b.delay(0, ms(4_000), &mut rng);
        assert!(d >= ms(100) && d <= ms(300), "{d:?}");
    }
    // Later: random(base, 3 * prev), capped after the draw.
    for _ in 0..DRAWS {
        let d = b.delay(5, ms(1_000), &mut rng);
        assert!(d >= ms(100) && d <= ms(3_000), "{d:?}");
    }
    let capped = (0..DRAWS)
        .map(|_| b.delay(5, ms(4_000), &mut rng))
        .filter(|d| *d == b.cap())
        .count();
    // random(100 ms, 12 s) is above the 5 s cap about 59 % of the time; all of those are the cap.
    assert!(capped > DRAWS / 2, "{capped}");
    // The iterator threads prev through.
    for d in b.delays(fastrand::Rng::with_seed(11)).take(DRAWS) {
        assert!(d >= b.floor() && d <= b.cap());
    }
}

#[test]
fn floor_lifts_tiny_draws_and_is_clamped_to_cap() {
    let b = Backoff::new(ms(10), ms(1_000))
        .with_floor(ms(50))
        .with_jitter(Jitter::Full);
    let v = draws(&b, 0, 5);
    assert!(v.iter().all(|d| *d == ms(50)), "exp 10 ms < floor 50 ms");
    let b = Backoff::new(ms(10), ms(100)).with_floor(ms(500));
    assert_eq!(b.floor(), ms(100));
    // A cap below the base is raised to the base.
    assert_eq!(Backoff::new(ms(10), ms(1)).cap(), ms(10));
}

#[test]
fn same_seed_same_delays() {
    let b = backoff(Jitter::Full);
    let a: Vec<_> = b.delays(fastrand::Rng::with_seed(99)).take(20).collect();
    let c: Vec<_> = b.delays(fastrand::Rng::with_seed(99)).take(20).collect();
    assert_eq!(a, c);
    let d: Vec<_> = b.delays(fastrand::Rng::with_seed(100)).take(20).collect();
    assert_ne!(a, d);
}
