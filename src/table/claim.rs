//! The claim path: a new identity takes a slot for its partition, or finds that another thread
//! inserted it meanwhile. Cold: an identity already in its window never comes here.
//!
//! Partitions share the table fairly. A claim of a never-used slot, or of another partition's
//! reclaimable slot, first reserves a slot of its own partition's cap ([`Claimer::reserve`]);
//! a partition at its cap may still reclaim its own reclaimable slots, which costs it nothing.
//! Reclaiming another partition's slot gives that partition one back ([`Claimer::evict`]). So a
//! partition's count is the number of slots that record it (plus claims in flight), and no
//! partition holds more than its cap: a flood of new identities in one partition is refused
//! at that partition's cap and never takes a slot another partition needs beyond it.
//!
//! The scan prefers, in this order: a never-used slot while the claimer's partition is below
//! its cap, then a reclaimable slot of its own partition (free of the cap), then another
//! partition's reclaimable slot (whose occupant, full but perhaps a light live caller, must
//! then claim again). A never-used slot comes first because a reclaimable occupant is often a
//! live caller whose buckets refilled between its requests: evicting it while the table has
//! room makes it claim again on its next request, and it then evicts another, so that a
//! tenant's callers would keep taking each other's slots in a table with room for all.

use super::{Kind, Slot, SlotState, Stamp, Table, TableFull, Tag, WINDOW};
use crate::bucket::Tats;
use crate::identity::Digest;
use crate::sync::{fence, Ordering, SpinWait};
use crate::table::Apply;

/// The partition a claim is made for, and its account of occupied slots. Called only on the
/// claim path (an identity not in the table yet), never for an update of a present identity.
pub(crate) trait Claimer {
    /// The claimer's partition (never [`Digest::NONE`] unless the table is unpartitioned).
    fn partition(&self) -> Digest;
    /// Takes one slot of the partition's cap; `false` at the cap (the claim is refused).
    fn reserve(&self, now: u64) -> bool;
    /// Gives back a slot `reserve` took that the claim did not use.
    fn release(&self, now: u64);
    /// A claim took a slot of partition `old` (not the claimer's, not `NONE`): one less for it.
    fn evict(&self, old: Digest, now: u64);
}

/// A table with no partitions: every claim is allowed and nothing is counted.
pub(crate) struct Unpartitioned;

impl Claimer for Unpartitioned {
    fn partition(&self) -> Digest {
        Digest::NONE
    }
    fn reserve(&self, _: u64) -> bool {
        true
    }
    fn release(&self, _: u64) {}
    fn evict(&self, _: Digest, _: u64) {}
}

pub(super) enum Claimed<R> {
    /// Claimed a slot, applied the update and published it.
    Done(R),
    /// Another thread inserted the identity meanwhile: update it there.
    Found(usize, SlotState),
}

/// A slot the claim may take: `own` if its occupant seemed to be of the claimer's partition
/// (read before the slot is held, so only a hint; checked again once it is).
#[derive(Clone, Copy)]
struct Candidate {
    i: usize,
    seen: SlotState,
    own: bool,
}

enum Pick {
    Found(usize, SlotState),
    /// Not in its window; the slot to claim, if any, and the claimer's own reclaimable slot to
    /// take instead if the first is a never-used one and the partition is at its cap.
    Absent(Option<Candidate>, Option<Candidate>),
    /// A claim for this very digest is in progress; look again when it is published.
    Wait,
}

enum Attempt<R> {
    Done(R),
    /// Lost a race for the slot or the commit: scan again.
    Retry,
    /// The partition is at its cap and the window has no slot of its own to reuse.
    Full,
}

impl<K: Kind> Table<K> {
    /// The path of an identity the first scan did not find.
    #[cold]
    pub(super) fn claim_path<R>(
        &self,
        d: Digest,
        home: usize,
        claimer: &impl Claimer,
        now: u64,
        stamp: Stamp,
        f: &mut impl FnMut(Tats, Tag) -> Apply<R>,
    ) -> Result<Claimed<R>, TableFull> {
        let spin = SpinWait::new();
        let own = claimer.partition();
        loop {
            // Acquire: a claim committed before this load has its digest visible to the scan.
            let seq = self.slots[home].claims.load(Ordering::Acquire);
            match self.claim_scan(d, home, own, now) {
                Pick::Found(i, seen) => return Ok(Claimed::Found(i, seen)),
                Pick::Wait => spin.snooze(),
                Pick::Absent(first, fallback) => {
                    // A claim refused at the cap touched no slot (`Table::claim` reserves
                    // first for a slot not its own), so `seq` still holds for the fallback.
                    let mut picks = first.into_iter().chain(fallback);
                    let Some(mut c) = picks.next() else {
                        return Err(TableFull);
                    };
                    loop {
                        match self.claim(d, (home, seq), (c, stamp), claimer, now, f) {
                            Attempt::Done(r) => return Ok(Claimed::Done(r)),
                            Attempt::Retry => break,
                            Attempt::Full => match picks.next() {
                                Some(next) => c = next,
                                None => return Err(TableFull),
                            },
                        }
                    }
                }
            }
        }
    }

    /// Looks for `d` in its window and picks the slot a claim for partition `own` would take.
    fn claim_scan(&self, d: Digest, home: usize, own: Digest, now: u64) -> Pick {
        let (mut mine, mut other) = (None, None);
        for k in 0..WINDOW.min(self.slots.len()) {
            let (i, slot) = self.at(home, k);
            // Acquire: pairs with the Release publish of the claim that wrote this digest.
            let seen = slot.state.load(Ordering::Acquire);
            if seen.is_empty() {
                // Never used: nothing was ever placed beyond it for this home. Preferred to
                // any reclaimable slot while the partition may grow (the module doc says why);
                // at the cap, the partition's own reclaimable slot, if the window has one.
                let empty = Candidate {
                    i,
                    seen,
                    own: false,
                };
                return Pick::Absent(Some(empty), mine);
            }
            let hit = slot.digest() == d;
            if seen.is_busy() {
                if hit {
                    return Pick::Wait;
                }
                continue;
            }
            if hit {
                return Pick::Found(i, seen);
            }
            if mine.is_none() && K::reclaimable(seen.tats(), now) {
                let own = slot.partition() == own;
                let c = Candidate { i, seen, own };
                if own {
                    mine = Some(c);
                } else if other.is_none() {
                    other = Some(c);
                }
            }
        }
        Pick::Absent(mine.or(other), None)
    }

    /// Claims the candidate slot for `d` (the home's claim counter read as `seq` before the
    /// scan) with the word's epoch and the occupant's class from `stamp`, settles the
    /// partitions' counts, commits the claim, applies `f` and publishes.
    fn claim<R>(
        &self,
        d: Digest,
        (home, seq): (usize, u64),
        (c, stamp): (Candidate, Stamp),
        claimer: &impl Claimer,
        now: u64,
        f: &mut impl FnMut(Tats, Tag) -> Apply<R>,
    ) -> Attempt<R> {
        let own = claimer.partition();
        // A slot that is not (or seemed not to be) our partition's costs one of our cap: a
        // partition at its cap is refused here, before it touches any slot.
        let mut reserved = !c.own;
        if reserved && !claimer.reserve(now) {
            return Attempt::Full;
        }
        let slot: &Slot = &self.slots[c.i];
        let busy = c.seen.claimed(K::fresh(now), stamp.tag);
        // Acquire on success (E4 in loom-tests/README.md): it reads the word the old
        // occupant's claim published (or a CAS in its release sequence), so that claim's
        // partition store is visible below. The scan's Acquire load
        // gives that edge too, unless the word it read was an earlier occupant's with the same
        // value (the generation wrapped): then only this Acquire reaches the partition
        // (`loom-tests/tests/aba.rs` fails without it). SeqCst on success, for the reload's
        // re-tag (`retag.rs`): this CAS, then `f`'s SeqCst load of the config generation,
        // against the reload's SeqCst generation bump, then its SeqCst load of this word; if
        // `f` saw no newer profile, the re-tag sees this claim. Failure Relaxed: we start over
        // with fresh Acquire loads.
        if slot
            .state
            .compare_exchange(c.seen, busy, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            if reserved {
                claimer.release(now);
            }
            return Attempt::Retry;
        }
        // Release fence: the digest, partition and class stores below come after the word is
        // BUSY for a reader that reads one of them, then (after an Acquire fence) the word
        // again: it sees BUSY or later, and reads the slot again (`Table::peek_stamped`,
        // `Table::read_slot`; an admit's CAS fails instead). The CAS itself orders only what
        // comes before its store; on x86-64 stores stay in order anyway, so this is no
        // instruction there. `loom-tests/tests/reads.rs` fails without it.
        fence(Ordering::Release);
        // Exact now (see the Acquire above).
        let old = if c.seen.is_empty() {
            Digest::NONE
        } else {
            slot.partition()
        };
        if !c.seen.is_empty() && old == own {
            // Our own slot: it is counted for us already.
            if reserved {
                claimer.release(now);
            }
        } else {
            // A slot that seemed ours but is another partition's (its word came back bit for bit
            // between our scan and our CAS: `loom-tests/tests/aba.rs`) costs one of our cap.
            let at_cap = !reserved && !claimer.reserve(now);
            if old != Digest::NONE {
                claimer.evict(old, now);
            }
            if at_cap {
                // Refused. The occupant is reclaimable (its word is the one our scan found so),
                // so it loses nothing by losing the slot, which any claim may take from it: the
                // slot is left as a lost commit leaves it, and no other partition's state is
                // ever written back by a claimer that does not own it.
                Self::leave_to_nobody(slot, busy);
                return Attempt::Full;
            }
            reserved = true;
        }
        debug_assert!(reserved || old == own);
        slot.set_digest(d);
        slot.set_partition(own);
        slot.set_class(stamp.class);
        // Release: publishes the digest to any later claimer of this home (it loads `claims`
        // with Acquire before scanning, and then finds our BUSY slot and waits). No Acquire:
        // the counter only grows (one a commit), so a success reads the very store (the one
        // that wrote `seq`) our Acquire load of `seq` read and synchronised with, and nothing
        // after it reads another thread's data (we apply `f` to our own BUSY word and
        // publish). Failure Relaxed: we start over with fresh Acquire loads.
        let committed = self.slots[home]
            .claims
            .compare_exchange(
                seq,
                seq.wrapping_add(1),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok();
        if !committed {
            // Another claim for this home committed since our scan, perhaps for `d`. Give the
            // slot back as a reclaimable one that matches nobody and is counted for nobody
            // (our partition had it counted, reserved or reused: one back). It stays OCCUPIED:
            // a scan that passed it while BUSY may have placed an identity beyond it.
            claimer.release(now);
            Self::leave_to_nobody(slot, busy);
            return Attempt::Retry;
        }
        let (tats, r) = match f(busy.tats(), busy.tag()) {
            Apply::Write(tats, r) => (tats, r),
            Apply::Keep(r) => (busy.tats(), r),
        };
        // Release: publishes the digest and partition with the word (pairs with the scans'
        // Acquire).
        slot.state.store(busy.published(tats), Ordering::Release);
        Attempt::Done(r)
    }

    /// Frees a slot we hold `BUSY` (as `busy`) without claiming it: reclaimable, matching
    /// nobody and counted for nobody (the caller settled the partitions' counts).
    fn leave_to_nobody(slot: &Slot, busy: SlotState) {
        slot.set_digest(Digest::NONE);
        slot.set_partition(Digest::NONE);
        // Release (E7 in loom-tests/README.md): the cleared digest is visible with the word
        // that frees the slot; without it a scan could read the word beside an earlier
        // occupant's digest and charge this slot as that identity's.
        slot.state
            .store(busy.published(busy.tats()), Ordering::Release);
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::table::tests::{Capped, Held, PA, PB};
    use crate::table::Identities;

    /// A scan's hint can be stale: a slot taken for the claimer's own partition that turns
    /// out to hold another's costs one of the claimer's cap, and gives the other partition one
    /// back. At the cap the claim is refused and the slot left to nobody: its occupant was
    /// reclaimable, so it loses nothing but the slot, and its partition has it counted no more.
    #[test]
    fn a_slot_that_only_seemed_ours_costs_one_of_our_cap() {
        let (pa, pb) = (PA, PB);
        let (d1, d2) = (Digest { hi: 1, lo: 3 }, Digest { hi: 2, lo: 5 });
        let mut f = |tats: Tats, _: Tag| Apply::Write(tats, ());
        // `b_held` slots held by B elsewhere (its cap is 1); returns what B's claim of the slot
        // A's identity holds, reclaimable from 100 on, got at 100 with a stale hint that the
        // slot is B's own, and the table and the partitions' counts after it.
        let mut claim_with_stale_hint = |b_held: u64| {
            let t: Table = Table::new(1);
            let held = Held::default();
            let (a, b) = (Capped::new(pa, 1, &held), Capped::new(pb, 1, &held));
            t.update(d1, &a, 0, |_| Apply::Write(Tats::full(100), ()))
                .unwrap();
            held.borrow_mut().insert(pb, b_held);
            let stale = Candidate {
                i: 0,
                seen: t.slots[0].state.load(Ordering::Acquire),
                own: true,
            };
            let seq = t.slots[0].claims.load(Ordering::Acquire);
            let got = t.claim(d2, (0, seq), (stale, Stamp::NONE), &b, 100, &mut f);
            let counts = {
                let h = held.borrow();
                (h.get(&pa).copied(), h.get(&pb).copied())
            };
            (got, t, counts)
        };
        // B holds its cap elsewhere: refused; A's identity is gone from the slot and from A's
        // count, and the slot is reclaimable by anyone (it matches nobody). The word first: a
        // slot left BUSY would make the peeks wait for ever.
        let (got, t, counts) = claim_with_stale_hint(1);
        assert!(matches!(got, Attempt::Full));
        let word = t.slots[0].state.load(Ordering::Acquire);
        assert!(!word.is_busy() && !word.is_empty() && Identities::reclaimable(word.tats(), 100));
        assert_eq!(
            (t.slots[0].digest(), t.slots[0].partition()),
            (Digest::NONE, Digest::NONE)
        );
        assert_eq!((t.peek(d1), t.peek(d2)), (None, None));
        assert_eq!(counts, (Some(0), Some(1)));
        // Below its cap B takes the slot, and A has one less.
        let (got, t, counts) = claim_with_stale_hint(0);
        assert!(matches!(got, Attempt::Done(())));
        assert_eq!((t.peek(d1), t.peek(d2)), (None, Some(Tats::full(100))));
        assert_eq!(counts, (Some(0), Some(1)));
    }
    /// Callers whose buckets refill between their requests (every slot reclaimable when its
    /// caller is away) keep their slots in a table with room for all of them: a new caller
    /// takes a never-used slot, not a neighbour's, so after the first round nobody claims.
    #[test]
    fn idle_callers_keep_their_slots_while_the_table_has_room() {
        let t: Table = Table::new(256);
        let held = Held::default();
        let a = Capped::new(PA, 256, &held);
        // Homes at random (splitmix64), so that windows overlap as real digests' do.
        let mix = |n: u64| {
            let z = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let ids: Vec<Digest> = (1..=128u64)
            .map(|n| Digest {
                hi: n,
                lo: mix(n) | 1,
            })
            .collect();
        let claims = |t: &Table| -> u64 {
            t.slots
                .iter()
                .map(|s| s.claims.load(Ordering::Acquire))
                .sum()
        };
        for round in 0..4u64 {
            let now = 1 + 1_000 * round;
            for &d in &ids {
                // Full again at once: reclaimable as soon as the caller is done.
                t.update(d, &a, now, |_| Apply::Write(Tats::full(now), ()))
                    .unwrap();
            }
            assert_eq!(claims(&t), ids.len() as u64, "round {round}");
        }
        assert_eq!(held.borrow().get(&PA).copied(), Some(ids.len() as u64));
    }
}
