//! loom models over the real table and bucket code (`src/sync.rs` swaps in loom's atomics).
//!
//! Run: `RUSTFLAGS="--cfg tollgate_loom -C debug-assertions=on" LOOM_MAX_PREEMPTIONS=2 cargo test
//! -p loom-tests --release` (`loom-tests/run.sh` does exactly that). The clock is quanta's
//! mock, frozen or moved only between phases, so every admission in a phase sees the same `now`.
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::{bucket, key, limiter, SUSTAINED, TABLE_FULL};
use tollgate::{Decision, Limiter, Profile};

/// `capacity` slots, one tenant (`t`) that may hold them all, burst `burst` tokens a second.
fn profile(capacity: u32, burst: u32) -> Profile {
    profile_per(capacity, burst, "1s")
}

/// As [`profile`], burst `burst` tokens per `per`.
fn profile_per(capacity: u32, burst: u32, per: &str) -> Profile {
    loom_tests::profile(capacity, 1.0, &bucket(burst, per), SUSTAINED)
}

fn admit(l: &Limiter, who: &str) -> Decision {
    l.admit(&key(l, "t", who))
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

/// Two threads admit the same new identity (burst 2), one of them twice. When a claim loses
/// its commit to the other's, it gives its slot back matching nobody; the other thread's next
/// admit may scan that slot first. The store that frees it is a Release (E7 in
/// `loom-tests/README.md`): read with the freed word, the slot's digest is the cleared one,
/// never the identity the lost claim wrote there, which would give the identity a second,
/// full slot. So exactly two of the three admits are admitted.
#[test]
fn a_slot_left_by_a_lost_commit_never_matches_the_identity_it_was_claimed_for() {
    let p = profile(4, 2);
    loom::model(move || {
        let (l, _mock) = limiter(&p);
        let once = {
            let l = l.clone();
            thread::spawn(move || admit(&l, "hot").is_admit() as usize)
        };
        let twice = {
            let l = l.clone();
            thread::spawn(move || (0..2).filter(|_| admit(&l, "hot").is_admit()).count())
        };
        let admitted = once.join().unwrap() + twice.join().unwrap();
        assert_eq!(admitted, 2, "one identity, burst 2");
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
        let (l, mock) = limiter(&p);
        assert_eq!(admit(&l, "a"), Decision::Admit);
        mock.increment(Duration::from_secs(2));
        let l2 = l.clone();
        let b = thread::spawn(move || admit(&l2, "b"));
        let a = admit(&l, "a");
        let b = b.join().unwrap();
        let full = TABLE_FULL;
        let peek = |who| l.peek(&key(&l, "t", who));
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

/// A clock reading that went stale before the admit reached the state word must not hand
/// credit back. Burst 1 token a second. At 0 one admission (the bucket is empty until 1 s).
/// Thread `a` admits while the main thread moves the clock to 1 s and admits, then admits once
/// more after `a` is done. If `a` read the clock at 0 and its CAS comes after the main thread's
/// admission at 1 s, the word's TAT is 2 s, a full bucket ahead of `a`'s stale `now`; clamping
/// it to `now + tau` (the reload clamp) and writing that down would erase a token of debt and
/// let a third admission through by 1 s. At most `1 + floor(1 s / 1 s) = 2` are admitted.
/// (The reload clamp is gone and a refusal writes nothing; the model stays, checking that it
/// stays so.)
///
/// (The clock is quanta's mock, a std atomic: loom does not preempt at the clock read itself,
/// but it does between the read and the table's loads and CASes, which is the race.)
#[test]
fn stale_clock_reading_never_returns_credit() {
    let p = profile_per(4, 1, "1s");
    loom::model(move || {
        let (l, mock) = limiter(&p);
        assert_eq!(admit(&l, "hot"), Decision::Admit);
        let l2 = l.clone();
        let a = thread::spawn(move || admit(&l2, "hot").is_admit());
        // A scheduling point, so that `a` may run (and read the clock) before the clock moves:
        // spawning is not one, and the mock clock is not a loom atomic.
        thread::yield_now();
        mock.increment(Duration::from_secs(1));
        let b = admit(&l, "hot").is_admit();
        let a = a.join().unwrap();
        let c = admit(&l, "hot").is_admit();
        let admitted = 1 + [a, b, c].into_iter().filter(|x| *x).count();
        assert!(
            admitted <= 2,
            "{admitted} admitted by 1 s (a {a}, b {b}, c {c})"
        );
    });
}
