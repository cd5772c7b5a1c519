//! How many identity slots each tenant holds, for its cap (`identities.tenant_share`): an array
//! of counters that every tenant has a place in, however many tenants there are.
//!
//! A tenant's slots are counted in two counters, picked by two halves of its digest; both only
//! ever count too much (another tenant's slots may share one), so the smaller is an upper bound
//! of what the tenant holds, exact unless both are shared. A tenant is refused a slot when that
//! bound is at its cap: never let past it, at worst refused a little early when both its
//! counters are shared with tenants that hold many slots. A table of entries, one per tenant,
//! would be exact, but it fills: a tenant of one idle caller keeps its entry while its slot
//! does, and once every entry is held so, every tenant new to the service is refused.
//!
//! The counters are as many as the identity slots (a power of two, 64 to 2^24), 8 bytes each:
//! on average a counter holds at most one slot of other tenants (fewer when the table is
//! not full), far below any cap but the smallest.

use crate::identity::Digest;
use crate::sync::{AtomicU64, Ordering};

/// The tenants' slot counters.
pub(crate) struct SlotCounts {
    counters: Box<[AtomicU64]>,
}

impl SlotCounts {
    /// Counters for a table of `identities` slots.
    pub(crate) fn new(identities: usize) -> SlotCounts {
        SlotCounts {
            counters: (0..Self::len_for(identities))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    /// How many counters a table of `identities` slots has.
    pub(crate) fn len_for(identities: usize) -> usize {
        identities.clamp(64, 1 << 24).next_power_of_two()
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.counters.len() * core::mem::size_of::<AtomicU64>()
    }

    /// The tenant's two counters. Its digest is a keyed hash, so the halves are independent and
    /// no caller can aim its tenant at another's counters.
    #[inline]
    fn of(&self, tenant: Digest) -> [&AtomicU64; 2] {
        let mask = self.counters.len() as u64 - 1;
        let (a, b) = (tenant.lo & mask, tenant.hi & mask);
        // Two different counters, so that one shared counter is never both.
        let b = if a == b { b ^ 1 } else { b };
        [&self.counters[a as usize], &self.counters[b as usize]]
    }

    /// One more slot for the tenant unless it may hold `cap` already; `false` then, and
    /// nothing counted.
    pub(crate) fn reserve(&self, tenant: Digest, cap: u64) -> bool {
        let [a, b] = self.of(tenant);
        // Relaxed: ordered for the other reservations by the Release half of `b`'s increment.
        a.fetch_add(1, Ordering::Relaxed);
        // AcqRel (C1 in loom-tests/README.md). Of any of the tenant's reservations, the one
        // whose increment of `b` comes last in `b`'s order reads every other's increment of
        // `b` there, and (Acquire of their Release, through the release sequence of the
        // read-modify-writes) sees their increments of `a` in its load below: it counts all of
        // them in both counters, so they never all pass the cap. The counts returned by two
        // Relaxed increments would let two reservations each miss the other in a different
        // counter and both pass a cap of one.
        let in_b = b.fetch_add(1, Ordering::AcqRel);
        // Relaxed: the Acquire above orders it; it counts our own increment too.
        let in_a = a.load(Ordering::Relaxed).saturating_sub(1);
        if in_a.min(in_b) < cap {
            return true;
        }
        // At the cap: take both back. Until then another reservation may count these two too
        // and be refused as well: refused early for an instant, never let past. Relaxed: a
        // take-back only ever lowers what another reservation counts by an increment of ours
        // that it counted.
        a.fetch_sub(1, Ordering::Relaxed);
        b.fetch_sub(1, Ordering::Relaxed);
        false
    }

    /// One slot less for the tenant: it holds the slot (a `reserve` counted it).
    pub(crate) fn release(&self, tenant: Digest) {
        for c in self.of(tenant) {
            // Relaxed: a give-back comes after its own reservation's increments in each
            // counter's order (the same thread, or a claim that took the slot after the
            // Acquire CAS on its word), and a count lowered by it no longer includes a slot
            // that is not held. Nothing else is published through the counters.
            let before = c.fetch_sub(1, Ordering::Relaxed);
            debug_assert!(before > 0, "a tenant gives back a slot it does not hold");
        }
    }

    /// The bound of the tenant's slots (exact unless both its counters are shared).
    #[cfg(test)]
    pub(crate) fn held(&self, tenant: Digest) -> u64 {
        let [a, b] = self.of(tenant);
        a.load(Ordering::Relaxed).min(b.load(Ordering::Relaxed))
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_is_held_to_its_cap_and_counted_back() {
        let s = SlotCounts::new(1000);
        let a = Digest { hi: 1, lo: 3 };
        assert!(s.reserve(a, 2) && s.reserve(a, 2));
        assert!(!s.reserve(a, 2), "at the cap");
        assert_eq!(s.held(a), 2, "a refusal counts nothing");
        s.release(a);
        assert_eq!(s.held(a), 1);
        assert!(s.reserve(a, 2));
    }

    /// A tenant sharing one counter with a tenant at its cap is still counted by its other.
    #[test]
    fn one_shared_counter_takes_nothing_from_a_tenant() {
        let s = SlotCounts::new(64);
        let (a, b) = (Digest { hi: 5, lo: 7 }, Digest { hi: 9, lo: 7 });
        for _ in 0..3 {
            assert!(s.reserve(a, 3));
        }
        assert_eq!(s.held(b), 0);
        assert!(s.reserve(b, 1));
        assert!(!s.reserve(b, 1));
    }

    /// However many tenants hold slots, a tenant new to the table has its counters (the
    /// entries a table of tenants would have filled).
    #[test]
    fn every_tenant_has_counters_however_many_hold_slots() {
        let s = SlotCounts::new(1024);
        for t in 0..10_000u64 {
            let d = Digest {
                hi: t.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                lo: t.wrapping_mul(0xBF58_476D_1CE4_E5B9) | 1,
            };
            assert!(s.reserve(d, 512), "tenant {t}");
        }
        assert_eq!(s.memory_bytes(), 1024 * 8);
    }

    #[test]
    fn the_counters_are_a_power_of_two_within_bounds() {
        assert_eq!(SlotCounts::new(0).counters.len(), 64);
        assert_eq!(SlotCounts::new(1000).counters.len(), 1024);
        assert_eq!(SlotCounts::new(1 << 30).counters.len(), 1 << 24);
    }
}
