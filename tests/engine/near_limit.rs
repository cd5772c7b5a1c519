//! `tollgate_near_limit_total`: an admission that leaves less than `observability.near_limit`
//! of the caller's burst is counted, at exactly that threshold, per class and mode (the
//! setting's validation is in `profile_observability.rs`).
#![cfg(feature = "metrics")]

use std::time::Duration;

use metrics_util::debugging::DebuggingRecorder;
use tollgate::profile::DEFAULT_NEAR_LIMIT;
use tollgate::quanta::Clock;
use tollgate::{Key, Limiter, Profile};
use tollgate_testkit::metrics::{snapshot, value};

fn profile(observability: &str) -> Profile {
    Profile::from_yaml(&format!(
        "name: n\nidentities: {{ capacity: 64 }}\n{observability}\nroute_classes:\n  \
         read:\n    burst: {{ tokens: 10, per: 1s }}\n    sustained: {{ tokens: 1000, per: 1h }}\n  \
         dry:\n    mode: shadow\n    burst: {{ tokens: 4, per: 1s }}\n    \
         sustained: {{ tokens: 1000, per: 1h }}\n"
    ))
    .unwrap()
}

/// Admits `n` requests of one caller in class `class` at one instant and returns, after each,
/// the near-limit count of that class (the debugging recorder's snapshots are deltas: summed).
fn counts_after_each(observability: &str, class: &str, n: usize) -> Vec<f64> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let (clock, mock) = Clock::mock();
    let limiter = metrics::with_local_recorder(&recorder, || {
        Limiter::builder(profile(observability))
            .clock(clock)
            .build()
            .unwrap()
    });
    // Well past the limiter's time zero: what is left is the TAT minus now, which at zero
    // would be the TAT alone.
    mock.increment(Duration::from_secs(3600));
    let c = limiter.route_class(class).unwrap();
    let key = Key::authenticated("acme", "alice", c).unwrap();
    let label = format!("route_class={class}");
    let mut total = 0.0;
    (0..n)
        .map(|_| {
            limiter.admit(&key);
            total += value(
                &snapshot(&snapshotter),
                "tollgate_near_limit_total",
                &[&label],
            );
            total
        })
        .collect()
}

#[test]
fn default_share_counts_admissions_that_leave_less_than_a_fifth_of_the_burst() {
    assert_eq!(DEFAULT_NEAR_LIMIT, 0.2);
    // Burst 10: after the 9th admission 1 token is left and after the 10th none, both fewer
    // than 2 (a fifth of 10); the 8th leaves exactly 2, which is not less. The 11th is
    // throttled, not admitted: not counted.
    let counts = counts_after_each("", "read", 11);
    assert_eq!(
        counts,
        [0., 0., 0., 0., 0., 0., 0., 0., 1., 2., 2.],
        "{counts:?}"
    );
}

#[test]
fn the_threshold_is_the_profiles_share_of_the_burst() {
    // 0.5 of 10: admissions leaving 4..0 tokens, the 6th to the 10th.
    let counts = counts_after_each("observability: { near_limit: 0.5 }", "read", 10);
    assert_eq!(counts, [0., 0., 0., 0., 0., 1., 2., 3., 4., 5.]);
    // 0.7 of 10 is 7 whatever the float product says: admissions leaving 6..0, the 4th on.
    let counts = counts_after_each("observability: { near_limit: 0.7 }", "read", 10);
    assert_eq!(counts, [0., 0., 0., 1., 2., 3., 4., 5., 6., 7.]);
    // 0.25 of 10 is 2.5: fewer than 2.5 tokens left is 2, 1 or 0: the 8th on.
    let counts = counts_after_each("observability: { near_limit: 0.25 }", "read", 10);
    assert_eq!(counts, [0., 0., 0., 0., 0., 0., 0., 1., 2., 3.]);
    // 0.9 of 10: the first admission, which claims the caller's slot (the decision's slow
    // path), leaves exactly 9, which is not less; the second leaves 8.
    let counts = counts_after_each("observability: { near_limit: 0.9 }", "read", 3);
    assert_eq!(counts, [0., 1., 2.]);
    // 0 counts nothing; 1 counts every admission that leaves less than the full burst.
    let counts = counts_after_each("observability: { near_limit: 0 }", "read", 12);
    assert!(counts.iter().all(|&c| c == 0.0), "{counts:?}");
    let counts = counts_after_each("observability: { near_limit: 1 }", "read", 3);
    assert_eq!(counts, [1., 2., 3.]);
}

#[test]
fn shadow_classes_count_with_their_mode_and_refilled_buckets_are_not_near() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let (clock, mock) = Clock::mock();
    let limiter = metrics::with_local_recorder(&recorder, || {
        Limiter::builder(profile("")).clock(clock).build().unwrap()
    });
    let dry = limiter.route_class("dry").unwrap();
    let key = Key::authenticated("acme", "alice", dry).unwrap();
    // Burst 4, a fifth is 0.8: only the admission that leaves 0 is near. The 5th and 6th are
    // shadowed refusals (admitted, but computed as throttled): not near-limit admissions.
    for _ in 0..6 {
        assert!(limiter.admit(&key).is_admit());
    }
    let snap = snapshot(&snapshotter);
    let near = |mode: &str| {
        let mode = format!("mode={mode}");
        value(
            &snap,
            "tollgate_near_limit_total",
            &["route_class=dry", &mode],
        )
    };
    assert_eq!(near("shadow"), 1.0);
    assert_eq!(near("enforce"), 0.0);
    // Later the bucket is full again: the next admission leaves 3 of 4, nothing more counted
    // (the recorder's second snapshot holds what changed since the first).
    mock.increment(Duration::from_secs(2));
    limiter.admit(&key);
    let snap2 = snapshot(&snapshotter);
    assert_eq!(
        value(&snap2, "tollgate_near_limit_total", &["route_class=dry"]),
        0.0
    );
}
