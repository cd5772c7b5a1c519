//! loom models over the real table and bucket code (`src/sync.rs` swaps in loom's atomics).
//!
//! Run: `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p loom-tests --release`
//! (`loom-tests/run.sh` does exactly that). The clock is quanta's mock, frozen or moved only
//! between phases, so every admission in a phase sees the same `now`.
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use tollgate::quanta::Clock;
use tollgate::{Cause, Decision, Key, Limiter, Profile};

fn profile(capacity: u32, burst: u32) -> Profile {
    Profile::from_yaml(&format!(
        "name: loom\nidentities: {{ capacity: {capacity} }}\nroute_classes:\n  c:\n    \
         burst: {{ tokens: {burst}, per: 1s }}\n    sustained: {{ tokens: 100, per: 1s }}\n"
    ))
    .unwrap()
}

fn limiter(p: &Profile) -> (Arc<Limiter>, std::sync::Arc<tollgate::quanta::Mock>) {
    let (clock, mock) = Clock::mock();
    let l = Limiter::builder(p.clone())
        .clock(clock)
        .key_secret(b"loom")
        .build()
        .unwrap();
    (Arc::new(l), mock)
}

fn admit(l: &Limiter, who: &str) -> Decision {
    l.admit(&Key::authenticated("t", who, l.route_class("c").unwrap()).unwrap())
}

/// Two threads admit the same new identity (burst 2): whatever the interleaving of the claim,
/// its commit and the CAS retries, both are admitted (no token lost by a failed CAS) and the
/// identity has exactly one slot, so a third admit is refused (no token granted twice).
#[test]
fn same_key_two_threads_claim_and_admit() {
    let p = profile(4, 2);
    loom::model(move || {
        let (l, _mock) = limiter(&p);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let l = l.clone();
                thread::spawn(move || admit(&l, "hot"))
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), Decision::Admit);
        }
        assert!(matches!(admit(&l, "hot"), Decision::Throttle { .. }));
    });
}

/// Three threads on one existing identity with two tokens left: exactly two are admitted.
#[test]
fn same_key_three_threads_never_over_admit() {
    let p = profile(4, 3);
    loom::model(move || {
        let (l, _mock) = limiter(&p);
        assert_eq!(admit(&l, "hot"), Decision::Admit);
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let l = l.clone();
                thread::spawn(move || admit(&l, "hot").is_admit())
            })
            .collect();
        let admitted = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|a| *a)
            .count();
        assert_eq!(admitted, 2);
    });
}

/// One slot. Identity A has refilled to full; A and B arrive together. Exactly one of them gets
/// the slot and is charged; the other is refused with `TableFull`; the winner's state is its
/// own (one token spent) and the loser left no trace: no state lost, no identities merged.
#[test]
fn reclaim_races_an_admit_of_the_old_identity() {
    let p = profile(1, 1);
    loom::model(move || {
        let (clock, mock) = Clock::mock();
        let l = Arc::new(
            Limiter::builder(p.clone())
                .clock(clock)
                .key_secret(b"loom")
                .build()
                .unwrap(),
        );
        assert_eq!(admit(&l, "a"), Decision::Admit);
        mock.increment(Duration::from_secs(2));
        let l2 = l.clone();
        let b = thread::spawn(move || admit(&l2, "b"));
        let a = admit(&l, "a");
        let b = b.join().unwrap();
        let full = Decision::Unavailable {
            retry_after: None,
            cause: Cause::TableFull,
        };
        let c = l.route_class("c").unwrap();
        let peek = |who| l.peek(&Key::authenticated("t", who, c).unwrap());
        match (a, b) {
            (Decision::Admit, d) => {
                assert_eq!(d, full);
                assert!(matches!(peek("a"), Decision::Throttle { .. }));
                assert_eq!(peek("b"), Decision::Admit);
            }
            (d, Decision::Admit) => {
                assert_eq!(d, full);
                assert!(matches!(peek("b"), Decision::Throttle { .. }));
                assert_eq!(peek("a"), Decision::Admit);
            }
            other => panic!("neither got the slot: {other:?}"),
        }
    });
}
