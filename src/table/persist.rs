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
