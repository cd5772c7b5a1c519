//! The slot's state word: both TATs, the profile epoch they were written under, the generation
//! and two flags in one `u128`, and the clock's ceiling that keeps every TAT inside its field.
//!
//! ```text
//!  127   126       125..120  119..118  117 ........ 59   58 ......... 0
//! +----+----------+--------+---------+----------------+----------------+
//! |BUSY| OCCUPIED |  gen   |  epoch  | sustained TAT  |   burst TAT    |
//! +----+----------+--------+---------+----------------+----------------+
//! ```
//!
//! `epoch` is the reload count, mod 4, of the profile whose emission intervals the TATs are
//! counted in (see `Limiter::reload`): a decision under another profile converts them first.
//!
//! Each field is declared by its length and starts where the one before it ends (sharded-slab's
//! `Pack`), so fields cannot overlap by construction; `const` asserts check the word's bit
//! budget and that the largest TAT the limiter can write fits in its field.

use crate::bucket::Tats;
use crate::sync::{AtomicU128, Ordering};

/// A run of bits in the state word: `len` bits from `shift`.
#[derive(Clone, Copy)]
struct Field {
    shift: u32,
    len: u32,
}

impl Field {
    /// The field at bit 0.
    const fn first(len: u32) -> Field {
        Field { shift: 0, len }
    }
    /// The field just above this one.
    const fn next(self, len: u32) -> Field {
        Field {
            shift: self.shift + self.len,
            len,
        }
    }
    /// The bit after the field's last.
    const fn end(self) -> u32 {
        self.shift + self.len
    }
    /// The largest value the field holds.
    const fn max(self) -> u128 {
        (1 << self.len) - 1
    }
    /// The field's bits in place.
    const fn mask(self) -> u128 {
        self.max() << self.shift
    }
}

/// Times are nanoseconds since the limiter was built, in 59 bits (18 years).
const TAT_BITS: u32 = 59;
const BURST: Field = Field::first(TAT_BITS);
const SUSTAINED: Field = BURST.next(TAT_BITS);
/// The profile epoch (reload count mod 4) the TATs were written under.
const EPOCH: Field = SUSTAINED.next(2);
/// Bumped (wrapping) by every claim and every re-tag of a reload: the ABA guard.
const GEN: Field = EPOCH.next(6);
/// The slot holds (or held) an identity; never cleared once set.
const OCCUPIED_BIT: Field = GEN.next(1);
/// A claim is in progress: the digest is being written; nobody else may write the word.
const BUSY_BIT: Field = OCCUPIED_BIT.next(1);

const TAT_MASK: u128 = BURST.max();
const EPOCH_MASK: u128 = EPOCH.mask();
const GEN_MASK: u128 = GEN.mask();
const OCCUPIED: u128 = OCCUPIED_BIT.mask();
const BUSY: u128 = BUSY_BIT.mask();
/// Everything that names the occupant, as opposed to its TATs.
const OCCUPANT: u128 = BUSY | OCCUPIED | GEN_MASK;

/// How many profile epochs a word can name: a reload walks the table and re-tags the words of
/// the epoch whose tag it is about to reuse (`table/retag.rs`).
pub(crate) const EPOCHS: usize = 1 << 2;

/// The clock stops here (16 years after the limiter was built), so that a TAT, at most
/// [`DEBT_CAP`] ahead of the clock, always fits in its 59 bits.
pub(crate) const MAX_NOW: u64 = (1 << TAT_BITS) - DEBT_CAP;

// The fields use the word exactly, and no two share a bit.
const _: () = assert!(BUSY_BIT.end() == u128::BITS);
const _: () = assert!(EPOCH.len == EPOCHS.trailing_zeros());
const _: () = assert!(BURST.mask() & SUSTAINED.mask() == 0);
const _: () = assert!((BURST.mask() | SUSTAINED.mask()) & (OCCUPANT | EPOCH_MASK) == 0);
const _: () = assert!(EPOCH_MASK & OCCUPANT == 0);
const _: () = assert!(GEN_MASK & (OCCUPIED | BUSY) == 0 && OCCUPIED & BUSY == 0);
// The largest TAT written: `now + tau`, where `tau = ceil(per / tokens) * tokens` is below
// `per + tokens`; a tenant's window end is at most `now + window`, and windows are periods too;
// a reload's conversion writes at most `at + DEBT_CAP` with `at` a clock reading.
const _: () = assert!(
    crate::profile::MAX_PERIOD_NANOS as u128 + crate::profile::MAX_TOKENS as u128
        <= DEBT_CAP as u128
);
const _: () = assert!(MAX_NOW as u128 + DEBT_CAP as u128 <= TAT_MASK + 1);

pub(crate) use crate::bucket::DEBT_CAP;

/// A profile epoch as the state word keeps it: the reload count mod [`EPOCHS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tag(u8);

impl Tag {
    /// The tag of reload count `epoch`.
    #[inline]
    pub(crate) const fn of(epoch: u64) -> Tag {
        Tag((epoch % EPOCHS as u64) as u8)
    }
    /// Its place in a per-epoch array.
    #[inline]
    pub(crate) const fn index(self) -> usize {
        self.0 as usize
    }
}

/// One slot's state word (see the module doc).
///
/// All zero is a never-used slot. `gen` (6 bits, wrapping) changes on every claim, and a claim
/// also sets both TATs to the claim time, so a word seen for one occupant does not recur for
/// the next unless 64 claims of the same slot fall within the same clock tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotState(u128);

impl SlotState {
    /// A never-used slot's word.
    pub(crate) const EMPTY: SlotState = SlotState(0);

    #[inline]
    pub(crate) fn is_empty(self) -> bool {
        self.0 & OCCUPIED == 0
    }
    #[inline]
    pub(crate) fn is_busy(self) -> bool {
        self.0 & BUSY != 0
    }
    /// The epoch the TATs were written under.
    #[inline]
    pub(crate) fn tag(self) -> Tag {
        Tag(((self.0 & EPOCH_MASK) >> EPOCH.shift) as u8)
    }
    #[inline]
    pub(crate) fn tats(self) -> Tats {
        Tats {
            burst: ((self.0 >> BURST.shift) & TAT_MASK) as u64,
            sustained: ((self.0 >> SUSTAINED.shift) & TAT_MASK) as u64,
        }
    }
    /// The same occupant (and generation and epoch) with new TATs.
    #[inline]
    pub(crate) fn with_tats(self, t: Tats) -> SlotState {
        self.stamped(t, self.tag())
    }
    /// The same occupant (and generation) with new TATs, counted in epoch `tag`.
    #[inline]
    pub(crate) fn stamped(self, t: Tats, tag: Tag) -> SlotState {
        debug_assert!(u128::from(t.burst) <= TAT_MASK && u128::from(t.sustained) <= TAT_MASK);
        SlotState(
            self.0 & OCCUPANT
                | (u128::from(tag.0) << EPOCH.shift)
                | (u128::from(t.burst) << BURST.shift)
                | (u128::from(t.sustained) << SUSTAINED.shift),
        )
    }
    /// A reload's re-tag: the TATs converted to epoch `tag`, and the next generation, so that
    /// no CAS prepared against the old word succeeds even if a later word has the same bits.
    pub(crate) fn retagged(self, t: Tats, tag: Tag) -> SlotState {
        SlotState(self.next_gen() | self.0 & (OCCUPIED | BUSY)).stamped(t, tag)
    }
    /// This word's generation bits, bumped (wrapping).
    fn next_gen(self) -> u128 {
        (self.0 & GEN_MASK).wrapping_add(1 << GEN.shift) & GEN_MASK
    }
    /// True if `other` is this occupant's word, possibly with other TATs.
    #[inline]
    pub(crate) fn same_occupant(self, other: SlotState) -> bool {
        (self.0 ^ other.0) & OCCUPANT == 0
    }
    /// The word a claimer installs: busy, the next generation, the kind's fresh TATs (for an
    /// identity both buckets full at the claim time) in the claimer's epoch.
    pub(crate) fn claimed(self, fresh: Tats, tag: Tag) -> SlotState {
        SlotState(BUSY | OCCUPIED | self.next_gen()).stamped(fresh, tag)
    }
    /// A claim finished: not busy any more.
    pub(crate) fn published(self, t: Tats) -> SlotState {
        SlotState(self.0 & !BUSY).with_tats(t)
    }
}

/// The atomic state word.
#[derive(Debug)]
pub(crate) struct AtomicSlotState(AtomicU128);

impl AtomicSlotState {
    pub(crate) fn new() -> Self {
        AtomicSlotState(AtomicU128::new(0))
    }
    #[inline(always)]
    pub(crate) fn load(&self, o: Ordering) -> SlotState {
        SlotState(self.0.load(o))
    }
    #[inline(always)]
    pub(crate) fn compare_exchange(
        &self,
        current: SlotState,
        new: SlotState,
        success: Ordering,
        failure: Ordering,
    ) -> Result<SlotState, SlotState> {
        self.0
            .compare_exchange(current.0, new.0, success, failure)
            .map(SlotState)
            .map_err(SlotState)
    }
    #[inline]
    pub(crate) fn store(&self, v: SlotState, o: Ordering) {
        self.0.store(v.0, o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_word_round_trips() {
        let s = SlotState::EMPTY.claimed(Tats::full(7), Tag::of(6));
        assert!(s.is_busy() && !s.is_empty());
        assert_eq!(s.tag(), Tag(2));
        let t = Tats {
            burst: (1 << 59) - 1,
            sustained: 12345,
        };
        let p = s.published(t);
        assert_eq!((p.tats(), p.tag()), (t, Tag(2)));
        assert!(!p.is_busy() && !p.is_empty());
        assert!(p.same_occupant(p.with_tats(Tats::full(0))));
        assert_eq!(p.with_tats(Tats::full(0)).tag(), Tag(2));
        let q = p.stamped(t, Tag(3));
        assert!(p.same_occupant(q) && q.tag() == Tag(3) && q.tats() == t);
        assert!(!p.same_occupant(p.claimed(Tats::full(0), Tag(2))));
        // A re-tag keeps the occupant's flags but not its generation.
        let r = p.retagged(Tats::full(1), Tag(1));
        assert!(!p.same_occupant(r) && !r.is_busy() && !r.is_empty());
        assert_eq!((r.tats(), r.tag()), (Tats::full(1), Tag(1)));
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        assert_eq!(
            (BURST.shift, SUSTAINED.shift, EPOCH.shift, GEN.shift),
            (0, 59, 118, 120)
        );
        assert_eq!((OCCUPIED, BUSY), (1 << 126, 1 << 127));
        assert_eq!(GEN_MASK, 0x3f << 120);
        assert_eq!(EPOCH_MASK, 0x3 << 118);
    }

    /// The ABA guard: each claim moves the slot to the next generation, and 64 claims pass
    /// through 64 different occupants' words before one recurs.
    #[test]
    fn every_claim_bumps_the_generation_through_all_64() {
        let t = Tats::full(5);
        let mut s = SlotState::EMPTY;
        let mut seen: Vec<SlotState> = Vec::new();
        for _ in 0..64 {
            s = s.claimed(t, Tag::of(0)).published(t);
            assert!(!s.is_busy() && !s.is_empty());
            assert!(
                seen.iter().all(|o| !o.same_occupant(s)),
                "generation recurred after {} claims",
                seen.len()
            );
            seen.push(s);
        }
        let wrapped = s.claimed(t, Tag::of(0)).published(t);
        assert!(
            wrapped.same_occupant(seen[0]),
            "the 65th claim wraps to the first's generation"
        );
    }
}
