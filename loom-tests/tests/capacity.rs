//! loom models of shared capacity over the real code: the shard counter's window roll-over and
//! the all-or-nothing charge of bucket, tenant share and shard slot.
//!
//! Run: `loom-tests/run.sh` (see `admit.rs`).
#![cfg(tollgate_loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::limiter;
use tollgate::__loom::ShardCounter;
use tollgate::{Cause, Decision, Key, Profile};

/// One slot a window. Two requests read the clock in window 0, one in window 1, and one more
/// in window 1 after them. Whatever the interleaving, a late window-0 request never resets the
/// shard's window 1: at most one admission per window, so at most two in all.
#[test]
fn window_roll_over_never_exceeds_the_slots() {
    loom::model(|| {
        let c = Arc::new(ShardCounter::new());
        let taken = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = [0u64, 1, 0]
            .into_iter()
            .map(|w| {
                let (c, taken) = (c.clone(), taken.clone());
                thread::spawn(move || {
                    if c.take(w, 1) {
                        taken.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        if c.take(1, 1) {
            taken.fetch_add(1, Ordering::Relaxed);
        }
        assert!(taken.load(Ordering::Relaxed) <= 2);
        assert_eq!(c.used(1), 1);
    });
}

/// One shard with one slot a window; two tenants ask at once. Exactly one is admitted; the
/// other is refused for capacity and keeps every personal token (its charge was given back).
#[test]
fn bucket_and_shard_slot_are_charged_together_or_not_at_all() {
    let p = Profile::from_yaml(
        "name: loom\nidentities: { capacity: 8, tenant_share: 1 }\nroute_classes:\n  c:\n    burst: { tokens: 3, per: 1s }\n    \
         sustained: { tokens: 100, per: 1s }\nshared_capacity:\n  shards: 1\n  window: 1s\n  \
         slots_per_window: 1\n  tenant_share: 1\n",
    )
    .unwrap();
    loom::model(move || {
        let (l, _mock) = limiter(&p);
        let c = l.route_class("c").unwrap();
        let spawn = |tenant: &'static str| {
            let l = l.clone();
            thread::spawn(move || l.admit(&Key::authenticated(tenant, "p", c).unwrap()))
        };
        let (a, b) = (spawn("a"), spawn("b"));
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let refused_tenant = match (a, b) {
            (Decision::Admit, r) => ("b", r),
            (r, Decision::Admit) => ("a", r),
            other => panic!("nobody admitted: {other:?}"),
        };
        assert!(matches!(
            refused_tenant.1,
            Decision::Unavailable {
                cause: Cause::ShardFull,
                ..
            }
        ));
        let k = Key::authenticated(refused_tenant.0, "p", c).unwrap();
        assert_eq!(
            l.remaining(&k).burst,
            3,
            "the refused request kept a personal token"
        );
    });
}
