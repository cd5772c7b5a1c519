//! The identity table: fixed-capacity open addressing over 64-byte slots, one atomic state
//! word per slot, lock-free lookup and update, no allocation after construction.
//!
//! See `IMPLEMENTATION.md` for the protocol with pictures. In short:
//!
//! * An identity lives within [`WINDOW`] slots of its *home* (linear probing). A slot is never
//!   emptied again once used, so a scan may stop at the first never-used slot.
//! * The state word holds both buckets' TATs, the profile epoch they are counted in, and a
//!   generation. An admit is one CAS on it; a reload re-tags the words of the epoch whose tag
//!   it is about to reuse (`retag.rs`).
//! * A slot whose buckets are both full may be reclaimed for another identity: the claimer CASes
//!   the word to `BUSY` with the next generation, which makes every CAS prepared against the old
//!   occupant fail (the ABA guard), writes the new digest, and publishes.
//! * Two threads inserting the same new identity must not end up in two slots. Each home slot
//!   keeps a `claims` counter; a claim is committed by a CAS on the counter read before the
//!   scan, so a claim commits only if no other claim for that home committed in between.
//! * Every slot records its occupant's *partition* (for identities the tenant digest; the
//!   anonymous pseudo-tenant is one partition). A claim of a never-used slot or of another
//!   partition's reclaimable slot first reserves one of its partition's slots through the
//!   caller's [`Claimer`] (which refuses at the partition's cap), and reclaiming a slot gives
//!   one back to the old occupant's partition: see `claim.rs`. The hot path (an identity
//!   already in its window) never looks at partitions.

mod claim;
mod persist;
mod retag;
mod slot;
mod state;

pub(crate) use claim::{Claimer, Unpartitioned};
pub(crate) use persist::Occupant;

pub(crate) use state::{Tag, EPOCHS, MAX_NOW};

use slot::Slot;
use state::SlotState;

use crate::bucket::Tats;
use crate::identity::Digest;
use crate::sync::{fence, Ordering, SpinWait};

/// How far from its home slot an identity may live.
pub(crate) const WINDOW: usize = 64;

/// Asks Linux to back the table with 2 MiB pages before its memory is first touched. A table of
/// millions of slots is read at random; with 4 KiB pages nearly every lookup also misses the TLB
/// and walks the page tables (`madvise` mode is the common default for transparent huge pages).
/// Advice only: refused or unsupported, nothing changes.
#[cfg(all(target_os = "linux", not(tollgate_loom)))]
fn advise_huge_pages(start: usize, len: usize) {
    const HUGE: usize = 2 << 20;
    // Only whole huge pages inside the allocation.
    let first = start.next_multiple_of(HUGE);
    let end = (start + len) / HUGE * HUGE;
    if end > first {
        // SAFETY: (1) `[first, end)` lies inside the allocation the caller just made and owns,
        // and nothing references that memory yet; (2) MADV_HUGEPAGE changes no contents and no
        // mapping a Rust reference could observe, only how future faults are served; (3) the
        // result is ignored: an error leaves the memory exactly as it was.
        unsafe {
            libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(any(not(target_os = "linux"), tollgate_loom))]
fn advise_huge_pages(_start: usize, _len: usize) {}

/// No slot in the identity's window can be had, or its partition holds its cap and has no
/// reclaimable slot of its own there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TableFull;

/// What a table holds: when one of its slots may be reclaimed, and what a claim starts from.
pub(crate) trait Kind {
    /// True if the occupant's state is indistinguishable from a fresh one at `now`.
    fn reclaimable(t: Tats, now: u64) -> bool;
    /// The state a claim at `now` starts from (before the update is applied).
    fn fresh(now: u64) -> Tats;
}

/// The identity table's kind: a slot whose buckets are both full may be reclaimed.
pub(crate) struct Identities;

impl Kind for Identities {
    #[inline]
    fn reclaimable(t: Tats, now: u64) -> bool {
        t.is_full(now)
    }
    fn fresh(now: u64) -> Tats {
        Tats::full(now)
    }
}

/// What an update writes besides the TATs: the epoch they are counted in and, for a claim,
/// the occupant's class.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stamp {
    pub(crate) tag: Tag,
    pub(crate) class: Option<usize>,
}

impl Stamp {
    /// Tables that know no epochs (the tenants').
    const NONE: Stamp = Stamp {
        tag: Tag::of(0),
        class: None,
    };
}

/// What an update does with an identity's TATs.
pub(crate) enum Apply<R> {
    /// Write these TATs (the request was admitted).
    Write(Tats, R),
    /// Change nothing (the request was refused).
    Keep(R),
}

/// What one slot says of a digest (`Table::look`).
enum Look {
    Empty,
    Other,
    Busy,
    Found(SlotState),
}

enum Scan {
    Found(usize, SlotState),
    /// Not in its window.
    Absent,
    /// A claim for this very digest is in progress; look again when it is published.
    Wait,
}

/// The table. Its size is fixed at construction.
pub(crate) struct Table<K = Identities> {
    slots: Box<[Slot]>,
    kind: core::marker::PhantomData<K>,
}

impl<K: Kind> Table<K> {
    /// A table of `capacity` slots (at least one).
    pub(crate) fn new(capacity: usize) -> Table<K> {
        let capacity = capacity.max(1);
        let mut slots = Vec::with_capacity(capacity);
        advise_huge_pages(
            slots.as_ptr() as usize,
            capacity * core::mem::size_of::<Slot>(),
        );
        slots.extend((0..capacity).map(|_| Slot::new()));
        Table {
            slots: slots.into_boxed_slice(),
            kind: core::marker::PhantomData,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Bytes held by the table.
    pub(crate) fn memory_bytes(&self) -> usize {
        core::mem::size_of::<Self>() + core::mem::size_of_val(&*self.slots)
    }

    /// The home slot: Lemire's multiply-shift range reduction of the digest's low half.
    #[inline]
    fn home(&self, d: Digest) -> usize {
        ((u128::from(d.lo) * self.slots.len() as u128) >> 64) as usize
    }

    #[inline]
    fn at(&self, home: usize, k: usize) -> (usize, &Slot) {
        let mut i = home + k;
        if i >= self.slots.len() {
            i -= self.slots.len();
        }
        (i, &self.slots[i])
    }

    /// The identity's TATs without changing anything (`None` if it has no slot).
    pub(crate) fn peek(&self, d: Digest) -> Option<Tats> {
        self.peek_stamped(d).map(|(t, _)| t)
    }

    /// [`Table::peek`], with the epoch the TATs are counted in.
    pub(crate) fn peek_stamped(&self, d: Digest) -> Option<(Tats, Tag)> {
        loop {
            match self.scan(d, self.home(d)) {
                Scan::Found(i, s) => {
                    // No CAS follows to catch a stale pair: the scan read the word, then the
                    // digest, and a claim may have replaced the occupant in between (the digest
                    // then the new one's, the word the old one's). So check, as `read_slot`
                    // does, that the word still holds that occupant. Acquire fence: the digest
                    // loads may not be satisfied after the re-check; a claim's Release fence
                    // orders its digest stores after its CAS to BUSY, so a newer occupant's
                    // digest makes the re-check see a word of another occupant (scan again).
                    fence(Ordering::Acquire);
                    // Relaxed: ordered by the fence; only the occupant bits are compared. The
                    // TATs and tag returned are the scan's Acquire load's (the tag's edge to
                    // the config generation, `Table::cas_loop`).
                    let again = self.slots[i].state.load(Ordering::Relaxed);
                    if again.same_occupant(s) {
                        return Some((s.tats(), s.tag()));
                    }
                }
                Scan::Absent => return None,
                Scan::Wait => SpinWait::new().snooze(),
            }
        }
    }

    /// Applies `f` to the identity's TATs and writes what it returns in one CAS, retrying `f`
    /// on the fresh TATs when another admit of the same identity got there first. A new
    /// identity first claims a slot for `claimer`'s partition, starting from `K::fresh(now)`.
    #[inline]
    pub(crate) fn update<R>(
        &self,
        d: Digest,
        claimer: &impl Claimer,
        now: u64,
        mut f: impl FnMut(Tats) -> Apply<R>,
    ) -> Result<R, TableFull> {
        self.update_stamped(d, claimer, now, Stamp::NONE, |t, _| f(t))
    }

    /// [`Table::update`] where `f` also sees the epoch the TATs are counted in, and writes
    /// them counted in `stamp.tag` (a claim also records `stamp.class`). Always inlined, as
    /// `cas_loop` is: the decision's hot path (the claim path stays out of line).
    #[inline(always)]
    pub(crate) fn update_stamped<R>(
        &self,
        d: Digest,
        claimer: &impl Claimer,
        now: u64,
        stamp: Stamp,
        mut f: impl FnMut(Tats, Tag) -> Apply<R>,
    ) -> Result<R, TableFull> {
        let home = self.home(d);
        let spin = SpinWait::new();
        loop {
            let found = match self.scan(d, home) {
                Scan::Found(i, seen) => Some((i, seen)),
                Scan::Wait => {
                    spin.snooze();
                    continue;
                }
                // A new identity (or a race): the claim path scans again under the counter.
                Scan::Absent => match self.claim_path(d, home, claimer, now, stamp, &mut f)? {
                    claim::Claimed::Done(r) => return Ok(r),
                    claim::Claimed::Found(i, seen) => Some((i, seen)),
                },
            };
            if let Some((i, seen)) = found {
                if let Some(r) = self.cas_loop(&self.slots[i], seen, stamp.tag, &mut f) {
                    return Ok(r);
                }
                // The slot was reclaimed under us: the identity was full; look again.
            }
        }
    }

    /// The slot `d` is in now, if it has one: a pinned identity's hint, which may be stale as
    /// soon as it is returned.
    pub(crate) fn slot_of(&self, d: Digest) -> Option<usize> {
        loop {
            match self.scan(d, self.home(d)) {
                Scan::Found(i, _) => return Some(i),
                Scan::Absent => return None,
                Scan::Wait => SpinWait::new().snooze(),
            }
        }
    }

    /// [`Table::update`] of an identity that is in the table; `None`, changing nothing, if it
    /// is not (it never claims a slot).
    pub(crate) fn update_existing<R>(
        &self,
        d: Digest,
        mut f: impl FnMut(Tats) -> Apply<R>,
    ) -> Option<R> {
        self.update_existing_stamped(d, Stamp::NONE.tag, |t, _| f(t))
    }

    /// [`Table::update_existing`] where `f` also sees the epoch the TATs are counted in, and
    /// writes them counted in `tag`.
    pub(crate) fn update_existing_stamped<R>(
        &self,
        d: Digest,
        tag: Tag,
        mut f: impl FnMut(Tats, Tag) -> Apply<R>,
    ) -> Option<R> {
        let home = self.home(d);
        let spin = SpinWait::new();
        loop {
            match self.scan(d, home) {
                Scan::Found(i, seen) => {
                    if let Some(r) = self.cas_loop(&self.slots[i], seen, tag, &mut f) {
                        return Some(r);
                    }
                }
                Scan::Wait => spin.snooze(),
                Scan::Absent => return None,
            }
        }
    }

    /// The slot `d` would be at if it were at its home: the first the hot path tries.
    #[inline(always)]
    pub(crate) fn home_slot(&self, d: Digest) -> usize {
        self.home(d)
    }

    /// Slot `i`'s word if it holds `d` and is not busy (the check a scan makes of each slot;
    /// see `Table::scan`): what the fast path of a decision charges against.
    #[inline(always)]
    pub(crate) fn holding(&self, i: usize, d: Digest) -> Option<SlotState> {
        let slot = self.slots.get(i)?;
        match self.look(slot, d) {
            Look::Found(s) => Some(s),
            _ => None,
        }
    }

    /// `f`'s CAS loop on slot `i` if it holds `d` (the hot path of a decision whose
    /// identity is where it was last seen); `None`, changing nothing, if it does not, or if
    /// its occupant changed before the CAS took.
    #[inline(always)]
    pub(crate) fn charge_at<R>(
        &self,
        i: usize,
        d: Digest,
        tag: Tag,
        mut f: impl FnMut(Tats, Tag) -> Apply<R>,
    ) -> Option<R> {
        let seen = self.holding(i, d)?;
        self.cas_loop(&self.slots[i], seen, tag, &mut f)
    }

    /// What slot `slot` says of `d`: the Acquire load of its word, then its digest.
    #[inline(always)]
    fn look(&self, slot: &Slot, d: Digest) -> Look {
        // Acquire (E1 in loom-tests/README.md): pairs with the Release publish of the claim
        // that wrote this digest; without it the digest may still be an earlier occupant's.
        let s = slot.state.load(Ordering::Acquire);
        if s.is_empty() {
            return Look::Empty;
        }
        if slot.digest() != d {
            return Look::Other;
        }
        if s.is_busy() {
            return Look::Busy;
        }
        Look::Found(s)
    }

    /// One identity's CAS loop. `None` if the slot changed occupant. Always inlined: `f` and
    /// its result stay in registers.
    #[inline(always)]
    fn cas_loop<R>(
        &self,
        slot: &Slot,
        mut seen: SlotState,
        tag: Tag,
        f: &mut impl FnMut(Tats, Tag) -> Apply<R>,
    ) -> Option<R> {
        loop {
            let (tats, r) = match f(seen.tats(), seen.tag()) {
                Apply::Keep(r) => return Some(r),
                Apply::Write(tats, r) => (tats, r),
            };
            match self.cas(slot, seen, seen.stamped(tats, tag)) {
                Ok(()) => return Some(r),
                Err(actual) if actual.same_occupant(seen) => seen = actual,
                Err(_) => return None,
            }
        }
    }

    /// The state word's CAS from `seen` to `next`, the word found on failure.
    #[inline(always)]
    fn cas(&self, slot: &Slot, seen: SlotState, next: SlotState) -> Result<(), SlotState> {
        // Release on success: the word carries the epoch tag of the config the caller decided
        // under, and a decision that reads it (an Acquire load, or this failure's) then loads
        // the config generation (`ConfigCell::latest`): a tag newer than its config is told
        // apart from an older epoch's by that load alone, so it must see the generation the
        // caller saw (the Release / Acquire pair makes it so). The TATs need no ordering (the
        // word is the whole state; an RMW of any ordering continues the release sequence of the
        // claim's publish, so later readers still see its digest), and after a success nothing
        // is read: no Acquire. Failure Acquire: the word returned goes back to the decision (its
        // tag, then the generation), as above; a different occupant's word sends it back to
        // scan, which reloads with Acquire. Either weakened fails `loom-tests/tests/reload.rs`
        // (`a_word_of_a_newer_profile_is_never_read_as_an_older_ones`).
        slot.state
            .compare_exchange(seen, next, Ordering::Release, Ordering::Acquire)
            .map(|_| ())
    }

    /// Looks for `d` in its window (the hot path: no partitions, no candidates).
    #[inline(always)]
    fn scan(&self, d: Digest, home: usize) -> Scan {
        for k in 0..WINDOW.min(self.slots.len()) {
            let (i, slot) = self.at(home, k);
            match self.look(slot, d) {
                // Never used: nothing was ever placed beyond it for this home.
                Look::Empty => return Scan::Absent,
                Look::Busy => return Scan::Wait,
                Look::Found(s) => return Scan::Found(i, s),
                Look::Other => {}
            }
        }
        Scan::Absent
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests;
