//! The tenants' table: one small fixed table, keyed by the tenant digest (the anonymous
//! pseudo-tenant is one tenant), of the admissions each tenant counts in shared capacity's
//! current window; and the tenants' identity-slot counts (`slot_counts.rs`). Tenants never
//! compete with identities for space.
//!
//! An entry's state word (the table's usual 128-bit word, see `table/state.rs`) holds:
//!
//! ```text
//!  burst TAT field:      the end of the window the tenant's admissions are counted in
//!  sustained TAT field:  admissions in that window (24 bits)
//! ```
//!
//! An entry may be reclaimed for another tenant once its window is over: nothing it counts
//! matters then. So entries are held only by tenants admitted in the current window.

use crate::bucket::Tats;
use crate::decision::Cause;
use crate::identity::{Digest, DigestMap};
use crate::table::{Apply, Claimer, Kind, Table, Unpartitioned};

use super::slot_counts::SlotCounts;

// A window's admissions fit in the state word's TAT field (59 bits, `table/state.rs`).
const _: () = assert!(crate::profile::MAX_SLOTS_PER_WINDOW < 1 << 59);

/// One tenant's entry, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    end: u64,
    count: u64,
}

impl Entry {
    fn of(t: Tats) -> Entry {
        Entry {
            end: t.burst,
            count: t.sustained,
        }
    }
    fn tats(self) -> Tats {
        Tats {
            burst: self.end,
            sustained: self.count,
        }
    }
}

/// The tenants' table kind: an entry is reclaimable once its window is over; a new entry has a
/// window that is over (its end is the claim time, off every window grid).
pub(crate) struct TenantEntries;

impl Kind for TenantEntries {
    #[inline]
    fn reclaimable(t: Tats, now: u64) -> bool {
        Entry::of(t).end <= now
    }
    fn fresh(now: u64) -> Tats {
        Entry { end: now, count: 0 }.tats()
    }
}

/// The window the tenant counts in for a request in the window ending at `window_end`, and
/// what it used there: a stored window later than ours on the same grid is the tenant's newer
/// window (we are late), anything else is over.
fn window(e: Entry, window_end: u64, window_ns: u64) -> (u64, u64) {
    // Equality first: the common case, and it spares the division.
    let same_or_newer =
        e.end == window_end || (e.end > window_end && (e.end - window_end) % window_ns == 0);
    if same_or_newer {
        (e.end, e.count)
    } else {
        (window_end, 0)
    }
}

/// Each tenant's cap of identity slots: `ceil(capacity * identities.tenant_share * weight)`,
/// weights from `shared_capacity.tenants` (unlisted tenants and the anonymous pseudo-tenant
/// have weight 1).
#[derive(Clone, Debug)]
pub(crate) struct IdentityCaps {
    default: u64,
    listed: DigestMap<u64>,
}

impl IdentityCaps {
    pub(crate) fn new(
        capacity: u64,
        share: f64,
        weights: impl Iterator<Item = (Digest, f64)>,
    ) -> IdentityCaps {
        let cap = |w| super::CapacityConfig::cap(capacity, share, w);
        IdentityCaps {
            default: cap(1.0),
            listed: weights.map(|(d, w)| (d, cap(w))).collect(),
        }
    }

    /// The cap of `tenant`'s partition.
    pub(crate) fn of(&self, tenant: Digest) -> u64 {
        self.listed.get(&tenant).copied().unwrap_or(self.default)
    }
}

/// The tenants' table and slot counts.
pub(crate) struct Tenants {
    table: Table<TenantEntries>,
    slots: SlotCounts,
}

impl Tenants {
    /// The entries for a table of `identities` slots and `listed` listed tenants: a sixteenth
    /// of the identity table, at least 64 and at most 65,536, plus two per listed tenant.
    pub(crate) fn entries_for(identities: usize, listed: usize) -> usize {
        (identities / 16).clamp(64, 1 << 16) + 2 * listed
    }

    /// The bytes `new(identities, entries)` allocates.
    pub(crate) fn bytes_for(identities: usize, entries: usize) -> usize {
        let counters = SlotCounts::len_for(identities) * 8;
        entries.saturating_mul(64).saturating_add(counters)
    }

    /// The tenants of a table of `identities` slots, with `entries` entries.
    pub(crate) fn new(identities: usize, entries: usize) -> Tenants {
        Tenants {
            table: Table::new(entries),
            slots: SlotCounts::new(identities),
        }
    }

    /// Bytes held by the tenants, this struct included (as `Table::memory_bytes` counts its
    /// own, which is part of this one).
    pub(crate) fn memory_bytes(&self) -> usize {
        core::mem::size_of::<Self>() - core::mem::size_of::<Table<TenantEntries>>()
            + self.table.memory_bytes()
            + self.slots.memory_bytes()
    }

    /// Admissions the tenant holds in the window ending at `window_end` (for `peek`).
    pub(crate) fn used(&self, tenant: Digest, window_end: u64, window_ns: u64) -> u64 {
        self.table
            .peek(tenant)
            .map_or(0, |t| window(Entry::of(t), window_end, window_ns).1)
    }

    /// Takes `n` of the tenant's admissions, all or none, unless fewer than `n` of its `cap`
    /// are left; returns the end of the window they were counted in (for `give_back`), or the
    /// refusal.
    #[inline]
    pub(crate) fn take(
        &self,
        tenant: Digest,
        now: u64,
        (window_end, window_ns): (u64, u64),
        cap: u64,
        n: u64,
    ) -> Result<u64, Cause> {
        let taken = self.table.update(tenant, &Unpartitioned, now, move |t| {
            let e = Entry::of(t);
            let (end, used) = window(e, window_end, window_ns);
            if used + n > cap {
                Apply::Keep(None)
            } else {
                let next = Entry {
                    end,
                    count: used + n,
                };
                Apply::Write(next.tats(), Some(end))
            }
        });
        match taken {
            Ok(Some(end)) => Ok(end),
            Ok(None) => Err(Cause::TenantShare),
            Err(_) => Err(Cause::TableFull),
        }
    }

    /// Gives back `n` admissions taken in the window ending at `counted_end` (nothing once the
    /// tenant counts in a newer window).
    pub(crate) fn give_back(&self, tenant: Digest, counted_end: u64, n: u64) {
        self.table.update_existing(tenant, |t| {
            let e = Entry::of(t);
            if e.end == counted_end && e.count > 0 {
                let count = e.count - n.min(e.count);
                Apply::Write(Entry { count, ..e }.tats(), ())
            } else {
                Apply::Keep(())
            }
        });
    }

    /// Identity slots the tenant holds (with claims in flight), or more (`slot_counts.rs`).
    #[cfg(test)]
    pub(crate) fn held(&self, tenant: Digest) -> u64 {
        self.slots.held(tenant)
    }

    /// One more identity slot for the tenant unless it holds `cap`. A restore (`snapshot`)
    /// puts back slots through it too, within the cap of the profile restored into, so that a
    /// crafted file cannot give one partition more of the table than a claim could.
    pub(crate) fn hold(&self, tenant: Digest, cap: u64) -> bool {
        self.slots.reserve(tenant, cap)
    }

    /// One identity slot less for the tenant, which holds it.
    pub(crate) fn unhold(&self, tenant: Digest) {
        self.slots.release(tenant)
    }
}

/// A claim of an identity slot for `tenant`'s partition, as the identity table asks it. The
/// tenant's digest is asked for only when a slot is claimed (`tenant`, which may compute it:
/// the hot path of a known identity never needs it).
pub(crate) struct Partition<'a, T: Fn() -> Digest> {
    pub(crate) tenants: &'a Tenants,
    pub(crate) caps: &'a IdentityCaps,
    pub(crate) tenant: T,
}

impl<T: Fn() -> Digest> Claimer for Partition<'_, T> {
    fn partition(&self) -> Digest {
        (self.tenant)()
    }
    fn reserve(&self, _: u64) -> bool {
        let tenant = (self.tenant)();
        self.tenants.hold(tenant, self.caps.of(tenant))
    }
    fn release(&self, _: u64) {
        self.tenants.unhold((self.tenant)())
    }
    fn evict(&self, old: Digest, _: u64) {
        self.tenants.unhold(old)
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn tenant_windows_move_forward_on_their_grid() {
        let e = |end, count| Entry { end, count };
        assert_eq!(window(e(2_000, 3), 2_000, 1_000), (2_000, 3));
        assert_eq!(window(e(3_000, 3), 2_000, 1_000), (3_000, 3), "late");
        assert_eq!(window(e(1_000, 3), 2_000, 1_000), (2_000, 0), "over");
        assert_eq!(window(e(2_500, 3), 2_000, 1_000), (2_000, 0), "other grid");
    }

    #[test]
    fn an_entry_round_trips_and_is_kept_while_its_window_lasts() {
        let e = Entry {
            end: 5,
            count: crate::profile::MAX_SLOTS_PER_WINDOW,
        };
        assert_eq!(Entry::of(e.tats()), e);
        assert!(TenantEntries::reclaimable(e.tats(), 10));
        assert!(!TenantEntries::reclaimable(e.tats(), 4), "window not over");
        assert_eq!(Entry::of(TenantEntries::fresh(9)).count, 0);
    }

    /// A give-back returns admissions to the window they were counted in, never more than it
    /// counts, and nothing once the tenant counts in a newer window.
    #[test]
    fn a_give_back_returns_admissions_to_their_own_window_only() {
        let t = Tenants::new(1024, 64);
        let a = Digest { hi: 1, lo: 3 };
        let (first, second) = ((1_000, 1_000), (2_000, 1_000));
        assert_eq!(t.take(a, 0, first, 5, 3), Ok(1_000));
        t.give_back(a, 1_000, 2);
        assert_eq!(t.used(a, 1_000, 1_000), 1);
        t.give_back(a, 1_000, 5);
        assert_eq!(t.used(a, 1_000, 1_000), 0, "no more than it counts");
        assert_eq!(t.take(a, 1_500, second, 5, 4), Ok(2_000));
        t.give_back(a, 1_000, 4);
        assert_eq!(
            t.used(a, 2_000, 1_000),
            4,
            "the newer window keeps its count"
        );
    }

    /// When another tenant reclaims a tenant's full identity slot, the slot is counted off the
    /// old tenant (the eviction) and on the new one.
    #[test]
    fn a_reclaimed_slot_moves_from_its_tenant_to_the_new_one() {
        let tenants = Tenants::new(1024, 64);
        let caps = IdentityCaps::new(1, 1.0, core::iter::empty());
        let (a, b) = (Digest { hi: 1, lo: 3 }, Digest { hi: 2, lo: 5 });
        let table: Table = Table::new(1);
        let claim = |tenant: Digest, who, now| {
            let p = Partition {
                tenants: &tenants,
                caps: &caps,
                tenant: || tenant,
            };
            table.update(who, &p, now, |_| Apply::Write(Tats::full(now + 100), ()))
        };
        claim(a, Digest { hi: 7, lo: 7 }, 0).unwrap();
        assert_eq!((tenants.held(a), tenants.held(b)), (1, 0));
        // At 100 a's identity is full: b may reclaim its slot.
        claim(b, Digest { hi: 9, lo: 9 }, 100).unwrap();
        assert_eq!((tenants.held(a), tenants.held(b)), (0, 1));
    }

    /// A claim that reserved a slot and then lost it to a race gives the reservation back.
    #[test]
    fn a_released_reservation_is_given_back() {
        let tenants = Tenants::new(1024, 64);
        let caps = IdentityCaps::new(1, 1.0, core::iter::empty());
        let a = Digest { hi: 1, lo: 3 };
        let p = Partition {
            tenants: &tenants,
            caps: &caps,
            tenant: || a,
        };
        assert!(p.reserve(0));
        assert!(!p.reserve(0), "at its cap of 1");
        p.release(0);
        assert_eq!(tenants.held(a), 0);
        assert!(p.reserve(0));
    }

    #[test]
    fn the_table_is_a_sixteenth_of_the_identities_within_bounds_plus_two_per_listed() {
        assert_eq!(Tenants::entries_for(0, 0), 64);
        assert_eq!(Tenants::entries_for(16 * 1000 + 15, 0), 1000);
        assert_eq!(Tenants::entries_for(16 * 1000, 3), 1006);
        assert_eq!(Tenants::entries_for(1 << 30, 5), (1 << 16) + 10);
        let t = Tenants::new(1000, 100);
        assert_eq!(Tenants::bytes_for(1000, 100), 100 * 64 + 1024 * 8);
        assert_eq!(
            t.memory_bytes(),
            Tenants::bytes_for(1000, 100) + core::mem::size_of::<Tenants>()
        );
    }
}
