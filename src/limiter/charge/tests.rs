//! Tests that reach inside a charge: a decision between the two halves of a reload, and one
//! that holds a config older than the published one.

use std::time::Duration;

use quanta::Clock;

use crate::{BucketKind, Decision, Key, Limiter, Profile};

fn profile(per: &str) -> Profile {
    Profile::from_yaml(&format!(
        "name: w\nidentities: {{ capacity: 64 }}\nroute_classes:\n  c:\n    \
         burst: {{ tokens: 10, per: {per} }}\n    sustained: {{ tokens: 1000, per: 1h }}\n"
    ))
    .unwrap()
}

/// A reload swaps its config in, then publishes its generation: between the two, a thread
/// whose cache misses (its first decision) decides under the new profile while the
/// generation still says the old one. It must publish the generation itself before it
/// writes a word tagged with the new epoch: a decision on another thread, still holding
/// the old config, that reads the word must see a newer generation and decide again under
/// the new profile, not take the word's TATs as counted in an epoch four reloads old
/// (here: in none, so as counted in the old profile, which forgave 9 of the 10 tokens).
#[test]
fn a_decision_inside_a_reload_publishes_the_epoch_it_writes() {
    let (clock, _mock) = Clock::mock();
    let l = Limiter::builder(profile("10s"))
        .clock(clock)
        .key_secret(b"w")
        .build()
        .unwrap();
    let c = l.route_class("c").unwrap();
    let (k, other) = (
        Key::authenticated("t", "k", c).unwrap(),
        Key::authenticated("t", "other", c).unwrap(),
    );
    // This thread's cache now holds the first profile, at generation 0.
    assert_eq!(l.admit(&other), Decision::Admit);
    // The reload, up to its swap: 10 tokens per 1 s instead of per 10 s.
    let old = l.engine.config.load();
    let new = old.reload(profile("1s"), &l.engine.hasher, false).unwrap();
    drop(old);
    l.engine.config.swap_in(new);
    // Another thread's first decisions take the swapped-in profile and empty `k`.
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..10 {
                assert_eq!(l.admit(&k), Decision::Admit);
            }
        });
    });
    // At the same instant nothing is left, under either profile; the wait is the new one's.
    assert_eq!(
        l.admit(&k),
        Decision::Throttle {
            retry_after: Duration::from_millis(100),
            bucket: BucketKind::Burst,
        }
    );
    // The reload ends; the next one numbers its epoch after it.
    l.engine.config.publish(1);
    l.reload(profile("10s")).unwrap();
    assert!(matches!(l.admit(&k), Decision::Throttle { .. }));
}

/// A decision that still holds the config a reload replaced learns it from the published
/// generation (and decides again under the new one): it never takes a word as counted in
/// its old profile, whatever the word's tag.
#[test]
fn a_config_older_than_the_published_one_is_stale() {
    let (clock, _mock) = Clock::mock();
    let l = Limiter::builder(profile("10s"))
        .clock(clock)
        .build()
        .unwrap();
    let old = l.engine.config.load();
    l.reload(profile("1s")).unwrap();
    let new = l.engine.config.load();
    let tats = crate::bucket::Tats::full(0);
    for tag in [old.tag(), new.tag()] {
        assert!(l.in_epoch(&old, 0, tats, tag).is_err(), "stale");
        assert!(l.in_epoch(&new, 0, tats, tag).is_ok(), "current");
    }
}
