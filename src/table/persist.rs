//! What a snapshot reads out of the table and a restore writes back into a fresh one.
//!
//! Reading goes on while admits do: one slot at a time, with the table's own Acquire load of
//! the state word, then its Relaxed loads of digest and partition, then a second load of the
//! word that must show the same occupant (a seqlock's re-check). So what is read for a slot
//! is an occupant and TATs that slot really held together at one instant.
//!
//! Writing happens only into a table no other thread can see yet (the restore owns the
//! limiter it is building), at the very slot index the snapshot read, so every identity stays
//! within its window as it was. A slot the restore leaves out (its occupant was full, or
//! expired meanwhile) but that lies between a restored identity and its home is marked used,
//! as a reclaimable slot that matches nobody: scans stop at the first never-used slot, and a
//! never-used slot in front of an identity would hide it.

use super::{Kind, Slot, SlotState, Table, Tag};
use crate::bucket::Tats;
use crate::identity::Digest;
use crate::sync::{fence, Ordering};

/// One occupied slot as a snapshot saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Occupant {
    pub(crate) digest: Digest,
    pub(crate) partition: Digest,
    pub(crate) tats: Tats,
    /// The epoch the TATs are counted in.
    pub(crate) tag: Tag,
    /// The occupant's route class, if known.
    pub(crate) class: Option<usize>,
}

impl<K: Kind> Table<K> {
    /// The occupant of slot `i` and its TATs at one instant; `None` for a never-used slot, a
    /// slot that matches nobody, or one being claimed (its new occupant starts fresh: full).
    pub(crate) fn read_slot(&self, i: usize) -> Option<Occupant> {
        let slot: &Slot = &self.slots[i];
        loop {
            // Acquire: pairs with the Release publish of the claim that wrote the digest and
            // partition read below, as in `scan`.
            let first = slot.state.load(Ordering::Acquire);
            if first.is_empty() || first.is_busy() {
                return None;
            }
            let (digest, partition, class) = (slot.digest(), slot.partition(), slot.class());
            // Acquire fence: the digest and partition loads above may not be satisfied after
            // the re-check below. A claim that replaced the occupant meanwhile first CASed the
            // word to BUSY with the next generation, then a Release fence, then its digest
            // stores (`claim.rs`), so if we read its digest, this fence synchronises with that
            // one and the re-check sees a word of another occupant: we read again.
            // (`loom-tests/tests/reads.rs` fails without the claim's fence.)
            fence(Ordering::Acquire);
            // Relaxed: ordered by the fence; only the occupant bits are compared.
            let second = slot.state.load(Ordering::Relaxed);
            if !second.same_occupant(first) {
                continue;
            }
            if digest == Digest::NONE {
                return None;
            }
            return Some(Occupant {
                digest,
                partition,
                tats: second.tats(),
                tag: second.tag(),
                class,
            });
        }
    }

    /// The home slot of a digest (for the restore's checks).
    pub(crate) fn home_of(&self, d: Digest) -> usize {
        self.home(d)
    }

    /// Where a restored identity at slot `i` may live: within the window of its home.
    pub(crate) fn within_window(&self, d: Digest, i: usize) -> bool {
        let home = self.home(d);
        let dist = if i >= home {
            i - home
        } else {
            i + self.slots.len() - home
        };
        dist < super::WINDOW.min(self.slots.len())
    }

    /// Puts `o` into slot `i` of a table no other thread sees yet, and marks every never-used
    /// slot between its home and `i` used (matching nobody). The caller checked
    /// [`Table::within_window`].
    pub(crate) fn place_restored(&self, i: usize, o: Occupant) {
        let home = self.home(o.digest);
        let mut k = home;
        while k != i {
            let slot = &self.slots[k];
            if slot.state.load(Ordering::Relaxed).is_empty() {
                Self::set_nobody(slot);
            }
            k += 1;
            if k == self.slots.len() {
                k = 0;
            }
        }
        let slot = &self.slots[i];
        slot.set_digest(o.digest);
        slot.set_partition(o.partition);
        slot.set_class(o.class);
        let word = SlotState::EMPTY
            .claimed(Tats::full(0), o.tag)
            .published(o.tats);
        // Relaxed: no other thread sees this table yet (module doc); the limiter is handed to
        // them later through whatever synchronises that hand-over (a spawn, a lock, an `Arc`
        // sent on a channel), which carries every store of the restore with it.
        slot.state.store(word, Ordering::Relaxed);
    }

    /// If `d` is already in its window (a snapshot taken while the identity moved from one slot
    /// to a later one holds it twice), makes that slot match nobody and returns its partition.
    pub(crate) fn forget_restored(&self, d: Digest) -> Option<Digest> {
        let home = self.home(d);
        for k in 0..super::WINDOW.min(self.slots.len()) {
            let (_, slot) = self.at(home, k);
            let s = slot.state.load(Ordering::Relaxed);
            if s.is_empty() {
                return None;
            }
            if slot.digest() == d {
                let partition = slot.partition();
                Self::set_nobody(slot);
                return Some(partition);
            }
        }
        None
    }

    /// A used slot that matches nobody and is counted for nobody, full since time zero: what a
    /// claim that lost its commit leaves (see `claim.rs`), reclaimable by any partition. Only
    /// for a table being restored.
    fn set_nobody(slot: &Slot) {
        slot.set_digest(Digest::NONE);
        slot.set_partition(Digest::NONE);
        let word = SlotState::EMPTY
            .claimed(Tats::full(0), Tag::of(0))
            .published(Tats::full(0));
        // Relaxed, as in `place_restored`: no other thread sees this table yet.
        slot.state.store(word, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::super::{Apply, Unpartitioned};
    use super::*;

    /// A table of 256 slots, where a digest's home is the top byte of its low half.
    fn table() -> Table {
        Table::new(256)
    }

    /// The `n`th digest whose home in [`table`] is `home`.
    fn at_home(home: u64, n: u64) -> Digest {
        Digest {
            hi: n,
            lo: home << 56 | n << 1 | 1,
        }
    }

    fn occupant(d: Digest) -> Occupant {
        Occupant {
            digest: d,
            partition: Digest { hi: 9, lo: 9 },
            tats: Tats {
                burst: 1_000 + d.hi,
                sustained: 2_000 + d.hi,
            },
            tag: Tag::of(2),
            class: Some(1),
        }
    }

    #[test]
    fn a_restored_occupant_reads_back_as_it_was_placed() {
        let t = table();
        let o = occupant(at_home(10, 1));
        t.place_restored(10, o);
        assert_eq!(t.read_slot(10), Some(o));
        assert_eq!(t.peek(o.digest), Some(o.tats));
    }

    /// A never-used slot, one being claimed (its digest may be half written; its occupant
    /// starts full) and one that matches nobody have no occupant to snapshot.
    #[test]
    fn a_slot_without_a_settled_occupant_reads_as_none() {
        let t = table();
        assert_eq!(t.read_slot(10), None, "never used");
        t.place_restored(11, occupant(at_home(10, 1)));
        assert_eq!(t.read_slot(10), None, "matches nobody");
        let s = &t.slots[11];
        let busy = s
            .state
            .load(Ordering::Relaxed)
            .claimed(Tats::full(5), Tag::of(0));
        s.state.store(busy, Ordering::Relaxed);
        assert_eq!(t.read_slot(11), None, "being claimed");
    }

    /// Scans stop at the first never-used slot: one between a restored identity and its home
    /// would hide it, so the restore marks those used, matching nobody (also past the end).
    #[test]
    fn a_restored_identity_beyond_its_home_is_found_and_the_slots_before_it_match_nobody() {
        let t = table();
        for (home, i, before) in [(10, 13, [10, 11, 12]), (254, 1, [254, 255, 0])] {
            let o = occupant(at_home(home, 1));
            t.place_restored(i, o);
            assert_eq!(t.peek(o.digest), Some(o.tats), "home {home}, slot {i}");
            for k in before {
                assert!(
                    !t.slots[k].state.load(Ordering::Relaxed).is_empty(),
                    "{k} used"
                );
                assert_eq!(t.read_slot(k), None, "slot {k} matches nobody");
            }
            assert!(t.slots[i + 1].state.load(Ordering::Relaxed).is_empty());
        }
    }

    #[test]
    fn a_restored_slot_lies_within_the_window_of_its_home() {
        let t = table();
        let d = at_home(10, 1);
        assert!(t.within_window(d, 10) && t.within_window(d, 73));
        assert!(!t.within_window(d, 74), "64 slots on");
        assert!(!t.within_window(d, 9), "before its home");
        // Across the end of the table.
        let w = at_home(250, 1);
        assert!(t.within_window(w, 255) && t.within_window(w, 0) && t.within_window(w, 2));
        assert!(t.within_window(w, 57), "63 slots on");
        assert!(!t.within_window(w, 58), "64 slots on");
        assert!(!t.within_window(w, 249), "before its home");
        // A table smaller than the window: every slot.
        let small: Table = Table::new(16);
        assert!((0..16).all(|i| small.within_window(d, i)));
    }

    /// A snapshot taken while an identity moved holds it twice: the restore forgets the
    /// earlier slot, and only that identity's.
    #[test]
    fn forget_restored_unmatches_only_that_identity_and_names_its_partition() {
        let t = table();
        let (a, b, absent) = (at_home(10, 1), at_home(10, 2), at_home(10, 3));
        t.place_restored(10, occupant(a));
        t.place_restored(11, occupant(b));
        assert_eq!(t.forget_restored(absent), None);
        assert_eq!(t.forget_restored(at_home(200, 1)), None, "an empty window");
        assert_eq!(t.forget_restored(b), Some(occupant(b).partition));
        assert_eq!(t.peek(b), None);
        assert_eq!(t.peek(a), Some(occupant(a).tats));
    }

    #[test]
    fn home_of_is_the_slot_a_new_identity_takes_in_an_empty_table() {
        let t = table();
        let d = at_home(10, 1);
        t.update(d, &Unpartitioned, 0, |_| Apply::Write(Tats::full(100), ()))
            .unwrap();
        assert_eq!(t.home_of(d), 10);
        assert_eq!(t.read_slot(10).map(|o| o.digest), Some(d));
    }
}
