//! One identity's slot of the table: its state word, its digest, the claims committed for
//! identities whose home it is, and what a reload and a reclaim need to know of its occupant.

use super::state::AtomicSlotState;
use crate::identity::Digest;
use crate::sync::{AtomicU64, Ordering};

/// One identity's slot: exactly one 64-byte cache line.
///
/// Why 64 and not crossbeam's 128 (`CachePadded` on x86-64, because the spatial prefetcher
/// fetches lines in pairs): the slots of a table are written by whichever threads serve those
/// identities, at random; two identities sharing a 128-byte pair collide only when both are hot
/// at once, while padding to 128 would double the memory of a table sized in millions. A hot
/// identity's own line is never shared with another identity's state.
#[repr(C, align(64))]
pub(super) struct Slot {
    pub(super) state: AtomicSlotState,
    pub(super) digest_hi: AtomicU64,
    pub(super) digest_lo: AtomicU64,
    /// Claims committed for identities whose home is this slot (see the table's module doc).
    pub(super) claims: AtomicU64,
    /// The occupant's partition ([`Digest::NONE`] if it has none: never used, or given back
    /// by a claim that lost its commit). Written only while the slot is `BUSY`, like the digest.
    pub(super) partition_hi: AtomicU64,
    pub(super) partition_lo: AtomicU64,
    /// The occupant's route class plus one (0: not known, as for a restored slot), what a
    /// reload's re-tag converts its TATs by. Written only while the slot is `BUSY`.
    pub(super) class: AtomicU64,
}

#[cfg(not(tollgate_loom))]
const _: () = assert!(core::mem::size_of::<Slot>() == 64);

impl Slot {
    pub(super) fn new() -> Slot {
        Slot {
            state: AtomicSlotState::new(),
            digest_hi: AtomicU64::new(0),
            digest_lo: AtomicU64::new(0),
            claims: AtomicU64::new(0),
            partition_hi: AtomicU64::new(0),
            partition_lo: AtomicU64::new(0),
            class: AtomicU64::new(0),
        }
    }

    /// Relaxed, as [`Slot::partition`].
    pub(super) fn class(&self) -> Option<usize> {
        (self.class.load(Ordering::Relaxed) as usize).checked_sub(1)
    }

    /// Relaxed, as [`Slot::set_digest`]: the caller holds the slot `BUSY`.
    pub(super) fn set_class(&self, class: Option<usize>) {
        self.class
            .store(class.map_or(0, |c| c as u64 + 1), Ordering::Relaxed);
    }

    /// Relaxed: only read after an Acquire load of `state` that saw the claim that wrote them
    /// published; if a reclaim changes them meanwhile, it changed `state` first, and the CAS
    /// that follows every use of a digest fails.
    #[inline]
    pub(super) fn digest(&self) -> Digest {
        Digest {
            hi: self.digest_hi.load(Ordering::Relaxed),
            lo: self.digest_lo.load(Ordering::Relaxed),
        }
    }

    /// Relaxed: the caller holds the slot `BUSY`; the Release publish (or the Release commit of
    /// the claim counter) makes these stores visible before anyone can use them.
    pub(super) fn set_digest(&self, d: Digest) {
        self.digest_hi.store(d.hi, Ordering::Relaxed);
        self.digest_lo.store(d.lo, Ordering::Relaxed);
    }

    /// Relaxed, as [`Slot::digest`]: exact only after an Acquire load (or a successful
    /// Acquire CAS) of `state` that saw the publish of the claim that wrote it; otherwise a
    /// hint (a claim scan's preference), checked again once the slot is held `BUSY`.
    pub(super) fn partition(&self) -> Digest {
        Digest {
            hi: self.partition_hi.load(Ordering::Relaxed),
            lo: self.partition_lo.load(Ordering::Relaxed),
        }
    }

    /// Relaxed, as [`Slot::set_digest`]: the caller holds the slot `BUSY`.
    pub(super) fn set_partition(&self, p: Digest) {
        self.partition_hi.store(p.hi, Ordering::Relaxed);
        self.partition_lo.store(p.lo, Ordering::Relaxed);
    }
}
