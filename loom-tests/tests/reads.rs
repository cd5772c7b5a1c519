//! loom models of the table's reads that write nothing, racing a reclaim of the slot they
//! read: `Limiter::remaining` (what `peek` and a zero-cost item of `admit_all` read too) and
//! the snapshot's read of a slot. Neither ends in a CAS that would catch a stale pair, so each
//! reads the word, then the digest, then the word again (a seqlock's re-check), and a claim
//! orders its digest stores after its CAS to `BUSY` with a Release fence
//! (`src/table/claim.rs`).
//!
//! The race in both: `x` holds the one slot; thread `t` charges `x` two tokens and gives them
//! back, then admits the new `y`, which reclaims the slot (full again) and is charged one. A
//! read that takes the word `x`'s charge wrote and then `y`'s digest would give `y` the two
//! tokens `x` owed then.
//!
//! Run: `loom-tests/run.sh` (see `admit.rs`).
#![cfg(tollgate_loom)]

use loom::thread;
use loom_tests::{bucket, charge_and_refund, key, limiter, SUSTAINED};
use tollgate::{Decision, Limiter, Profile};

/// One slot; burst 4 tokens per 4 s (one a second), so the two tokens `x` is charged and the
/// one `y` is are different debts.
fn profile() -> Profile {
    loom_tests::profile(1, 1.0, &bucket(4, "4s"), SUSTAINED)
}

/// A cost above the burst: refused `Exceeds`, which refunds the item before it.
const ABOVE: u32 = 5;

/// The race of the module doc on `l`, whose slot `x` holds, full: spawns `t`.
fn race(l: &loom::sync::Arc<Limiter>) -> thread::JoinHandle<Decision> {
    let l = l.clone();
    thread::spawn(move || {
        // Refused at its second item, so `x` is full again and reclaimable.
        assert!(charge_and_refund(&l, "t", "x", 2, ABOVE).is_err());
        l.admit(&key(&l, "t", "y"))
    })
}

/// Whatever the interleaving, `y` has 4 tokens left (not claimed yet, or claimed but not yet
/// published: the read waits for a `BUSY` slot of its digest) or 3 (its own charge), never 2.
#[test]
fn remaining_never_reads_another_occupants_state() {
    let p = profile();
    loom::model(move || {
        let (l, _mock) = limiter(&p);
        assert!(charge_and_refund(&l, "t", "x", 1, ABOVE).is_err());
        let t = race(&l);
        // A scheduling point: spawning is not one.
        thread::yield_now();
        let left = l.remaining(&key(&l, "t", "y")).burst;
        assert_eq!(t.join().unwrap(), Decision::Admit);
        assert!(
            left == 4 || left == 3,
            "y has {left} left: x's state read as y's"
        );
    });
}

/// The one record of a snapshot of a limiter of `p` in which `who` alone was charged `n`
/// tokens at 0 s, and the length of the snapshot's header (the records follow it).
fn record_alone(p: &Profile, who: &str, n: u32) -> (Vec<u8>, usize) {
    let (l, _mock) = limiter(p);
    l.admit_all(&[(key(&l, "t", who), n)]).unwrap();
    let mut snap = Vec::new();
    l.snapshot(&mut snap).unwrap();
    // The record is 54 bytes (format version 2), then the 16-byte end.
    let end = snap.len() - 16;
    (snap[end - 54..end].to_vec(), end - 54)
}

/// Whatever the interleaving, the snapshot has no record (every state it read was full, or
/// the slot was busy), or `x`'s record as `x` alone charged two tokens would have it, or `y`'s
/// as `y` alone charged one: never `y`'s digest with `x`'s debts.
#[test]
fn a_snapshot_never_pairs_an_occupant_with_another_ones_state() {
    snapshot_racing_the_claims(true);
}

/// The same race, with `x` new to the table too: `t` claims the slot for `x` (charged two and
/// refunded) and then for `y`, while the main thread takes a snapshot. Whatever the
/// interleaving: no record, `x`'s as `x` alone charged two would have it, or `y`'s.
///
/// This pins the snapshot's Acquire load of the word (S2), which the model above cannot: there
/// the main thread wrote `x`'s digest itself before its `yield_now`, and loom never returns to
/// a thread, after it yields, a store it saw before the yield while a newer one exists (its
/// guard against spinning forever, `match_load_to_stores` in loom's `rt/atomic.rs`). Here only
/// `t` ever stored `x`'s digest, so a snapshot whose first load of the word is Relaxed may read
/// `y`'s published word, then `x`'s digest (nothing orders it after `y`'s stores; the Acquire
/// fence comes after the digest loads), then `y`'s word again: `y`'s debt as `x`'s record.
#[test]
fn a_snapshot_racing_both_claims_never_pairs_an_occupant_with_another_ones_state() {
    snapshot_racing_the_claims(false);
}

/// The snapshot models: the main thread snapshots while `t` races (`race`); the one record may
/// only be `x`'s or `y`'s as each alone would have it. `x_first`: the main thread claims the
/// slot for `x` (charged one and refunded) before the race.
fn snapshot_racing_the_claims(x_first: bool) {
    let p = profile();
    loom::model(move || {
        let (x, header) = record_alone(&p, "x", 2);
        let (y, _) = record_alone(&p, "y", 1);
        let (l, _mock) = limiter(&p);
        if x_first {
            assert!(charge_and_refund(&l, "t", "x", 1, ABOVE).is_err());
        }
        let t = race(&l);
        thread::yield_now();
        let mut snap = Vec::new();
        l.snapshot(&mut snap).unwrap();
        assert_eq!(t.join().unwrap(), Decision::Admit);
        let records = &snap[header..snap.len() - 16];
        assert!(
            records.is_empty() || records == x || records == y,
            "a record of neither x nor y: {records:?}"
        );
    });
}
