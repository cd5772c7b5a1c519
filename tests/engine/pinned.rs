//! Pinned identities (`Limiter::pin`, `Limiter::admit_pinned`): the same decisions as `admit`
//! on the key, through reclaims of the pin's slot, reloads, shared capacity and shadow mode.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::quanta::Mock;
use tollgate::{Decision, Key, Limiter, Profile};
use tollgate_testkit::{mock_limiter, profile, profile_with_capacity};

/// Two limiters of one profile and secret on their own mock clocks, moved together: one
/// decides by key, the other by pin.
fn twins(
    p: Profile,
) -> (
    (Limiter, std::sync::Arc<Mock>),
    (Limiter, std::sync::Arc<Mock>),
) {
    (mock_limiter(p.clone()), mock_limiter(p))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random admits of a few callers (some anonymous) with random steps of time, on a table
    /// small enough that slots are reclaimed and pins go stale, and random reloads between two
    /// profiles (after which half the pins are made again and half are older than the profile
    /// in force): every pinned decision equals the keyed one.
    #[test]
    fn a_pinned_decision_is_the_keyed_one(
        steps in proptest::collection::vec((0usize..7, 0u64..400), 1..300),
        capacity in prop_oneof![Just(0u64), Just(4), Just(1000)],
    ) {
        let classes = [(3, 100, 20, 2_000)];
        let p = if capacity == 0 {
            profile(4, &classes)
        } else {
            profile_with_capacity(4, &classes, 100, capacity)
        };
        let ((keyed, kmock), (pinned, pmock)) = twins(p.clone());
        let c = keyed.route_class("c0").unwrap();
        let names = ["alice", "bob", "carol", "dave"];
        let key = |i: usize| match i {
            0..=3 => Key::authenticated("acme", names[i], c).unwrap(),
            4 => Key::anonymous("192.0.2.1".parse().unwrap(), c),
            _ => Key::anonymous("198.51.100.9".parse().unwrap(), c),
        };
        let mut pins: Vec<_> = (0..6).map(|i| pinned.pin(&key(i))).collect();
        let other = if capacity == 0 {
            profile(4, &[(1, 300, 20, 2_000)])
        } else {
            profile_with_capacity(4, &[(1, 300, 20, 2_000)], 100, capacity)
        };
        let profiles = [p.clone(), other];
        let mut reloads = 0;
        for (who, ms) in steps {
            kmock.increment(Duration::from_millis(ms));
            pmock.increment(Duration::from_millis(ms));
            if who == 6 {
                reloads += 1;
                keyed.reload(profiles[reloads % 2].clone()).unwrap();
                pinned.reload(profiles[reloads % 2].clone()).unwrap();
                for i in (0..6).step_by(2) {
                    pins[i] = pinned.pin(&key(i));
                }
                continue;
            }
            prop_assert_eq!(keyed.admit(&key(who)), pinned.admit_pinned(&pins[who]), "caller {}", who);
        }
    }
}

/// A pin whose slot was reclaimed for someone else (the identity was full) decides the full
/// way, claims a slot again, and its debts are what the keyed path would give.
#[test]
fn a_pin_follows_its_identity_to_another_slot() {
    // One slot: every new identity reclaims it once the occupant is full.
    let (l, mock) = mock_limiter(profile(1, &[(1, 1_000, 10, 10_000)]));
    let c = l.route_class("c0").unwrap();
    let (alice, bob) = (
        Key::authenticated("acme", "alice", c).unwrap(),
        Key::authenticated("acme", "bob", c).unwrap(),
    );
    let pin = l.pin(&alice);
    assert_eq!(l.admit_pinned(&pin), Decision::Admit);
    assert!(!l.admit_pinned(&pin).is_admit(), "one token of burst");
    // Bob cannot have the slot while alice owes; once she is full he reclaims it.
    assert!(matches!(l.admit(&bob), Decision::Unavailable { .. }));
    mock.increment(Duration::from_secs(10));
    assert_eq!(l.admit(&bob), Decision::Admit);
    // Alice's pin points at bob's slot now: its check refuses the hint, the full way finds
    // no slot for her (bob owes), and fails closed as the key would.
    assert_eq!(l.admit_pinned(&pin), l.admit(&alice));
    mock.increment(Duration::from_secs(10));
    assert_eq!(l.admit_pinned(&pin), Decision::Admit);
    assert!(
        !l.admit(&alice).is_admit(),
        "the pin charged alice's bucket"
    );
}

#[test]
fn a_pin_holds_across_reloads_and_in_shadow_mode() {
    let (l, _mock) = mock_limiter(profile(64, &[(2, 1_000, 100, 60_000)]));
    let c = l.route_class("c0").unwrap();
    let k = Key::authenticated("acme", "alice", c).unwrap();
    let pin = l.pin(&k);
    assert_eq!(pin.route_class(), c);
    assert_eq!(l.admit_pinned(&pin), Decision::Admit);
    l.reload(profile(64, &[(1, 1_000, 100, 60_000)])).unwrap();
    // One token charged under two, converted: the burst of one is used up.
    assert!(!l.admit_pinned(&pin).is_admit());
    let shadow = Profile::from_yaml(
        "name: test\nidentities: { capacity: 64 }\nmode: shadow\nroute_classes:\n  c0:\n    \
         burst: { tokens: 1, per: 1000ms }\n    sustained: { tokens: 100, per: 60000ms }\n",
    )
    .unwrap();
    l.reload(shadow).unwrap();
    assert_eq!(l.admit_pinned(&pin), Decision::Admit, "shadow mode admits");
}

#[test]
#[should_panic(expected = "a Pinned of another limiter")]
fn a_pin_of_another_limiter_is_refused() {
    let (a, _) = mock_limiter(profile(64, &[(2, 1_000, 100, 60_000)]));
    let (b, _) = mock_limiter(profile(64, &[(2, 1_000, 100, 60_000)]));
    let pin = a.pin(&Key::authenticated("acme", "alice", a.route_class("c0").unwrap()).unwrap());
    b.admit_pinned(&pin);
}

/// A pin holds digests, never the key's strings, and its debug form shows none of them (it may
/// end up in a log line of any tenant's request).
#[test]
fn a_pins_debug_form_names_no_tenant_or_principal() {
    let (l, _mock) = mock_limiter(profile(64, &[(2, 1_000, 100, 60_000)]));
    let pin = l.pin(
        &Key::authenticated(
            "acme-tenant",
            "alice-principal",
            l.route_class("c0").unwrap(),
        )
        .unwrap(),
    );
    let shown = format!("{pin:?}");
    assert!(
        shown.starts_with("Pinned {") && shown.contains("generation"),
        "{shown}"
    );
    assert!(
        !shown.contains("acme-tenant") && !shown.contains("alice-principal"),
        "{shown}"
    );
}

#[test]
fn a_pin_belongs_to_the_limiter_that_made_it_only() {
    let (a, _) = mock_limiter(profile(64, &[(2, 1_000, 100, 60_000)]));
    let (b, _) = mock_limiter(profile(64, &[(2, 1_000, 100, 60_000)]));
    let pin = a.pin(&Key::authenticated("acme", "alice", a.route_class("c0").unwrap()).unwrap());
    assert!(pin.belongs_to(&a));
    assert!(!pin.belongs_to(&b));
}
