//! The tenants' table: one small fixed table, keyed by the tenant digest (the anonymous
//! pseudo-tenant is one tenant), of what shared capacity and the identity table count per
//! tenant. Tenants never compete with identities for space.
//!
//! An entry's state word (the table's usual 128-bit word, see `table/state.rs`) holds:
//!
//! ```text
//!  burst TAT field:      the end of the window the tenant's admissions are counted in
//!  sustained TAT field:  held (35 bits) << 24 | admissions in that window (24 bits)
//! ```
//!
//! `held` is the number of identity-table slots that record the tenant as their partition
//! (plus claims in flight). An entry may be reclaimed for another tenant only when its window
//! is over *and* it holds no identity slot, so the entry of a tenant with a live identity is
//! never lost, and nothing a tenant counts can be lost while it matters.

use crate::bucket::Tats;
use crate::decision::Cause;
use crate::identity::{Digest, DigestMap};
use crate::table::{Apply, Claimer, Kind, Table, Unpartitioned};

const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
// A window's admissions fit in the count, a table's slots in `held` (59 - 24 = 35 bits:
// the state word's TAT field, `table/state.rs`).
const _: () = assert!(crate::profile::MAX_SLOTS_PER_WINDOW <= COUNT_MASK);
const _: () = assert!(crate::profile::MAX_CAPACITY < 1 << (59 - COUNT_BITS));

/// One tenant's entry, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    end: u64,
    count: u64,
    held: u64,
}

impl Entry {
    fn of(t: Tats) -> Entry {
        Entry {
            end: t.burst,
            count: t.sustained & COUNT_MASK,
            held: t.sustained >> COUNT_BITS,
        }
    }
    fn tats(self) -> Tats {
        Tats {
            burst: self.end,
            sustained: self.held << COUNT_BITS | self.count,
        }
    }
}

/// The tenants' table kind: an entry is reclaimable once its window is over and it holds no
/// identity slot; a new entry has a window that is over (its end is the claim time, off every
/// window grid) and nothing held.
pub(crate) struct TenantEntries;

impl Kind for TenantEntries {
    #[inline]
    fn reclaimable(t: Tats, now: u64) -> bool {
        let e = Entry::of(t);
        e.end <= now && e.held == 0
    }
    fn fresh(now: u64) -> Tats {
        Entry {
            end: now,
            count: 0,
            held: 0,
        }
        .tats()
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

/// Why a restored slot could not be counted for its tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unheld {
    /// The tenant already holds its cap of identity slots.
    AtCap,
    /// The tenants' table has no entry for it and none can be had.
    NoEntry,
}

/// The tenants' table.
pub(crate) struct Tenants {
    table: Table<TenantEntries>,
}

impl Tenants {
    /// The entries for a table of `identities` slots and `listed` listed tenants: a sixteenth
    /// of the identity table, at least 64 and at most 65,536, plus two per listed tenant.
    pub(crate) fn entries_for(identities: usize, listed: usize) -> usize {
        (identities / 16).clamp(64, 1 << 16) + 2 * listed
    }

    pub(crate) fn new(entries: usize) -> Tenants {
        Tenants {
            table: Table::new(entries),
        }
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.table.memory_bytes()
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
                    ..e
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

    /// Identity slots the tenant holds (with claims in flight).
    #[cfg(test)]
    pub(crate) fn held(&self, tenant: Digest) -> u64 {
        self.table.peek(tenant).map_or(0, |t| Entry::of(t).held)
    }

    /// One more identity slot for the tenant unless it holds `cap`; refused too if the tenant
    /// has no entry and none can be had (fail closed, for this tenant only). A restore
    /// (`snapshot`) puts back slots through it too, within the cap of the profile restored
    /// into, so that a crafted file cannot give one partition more of the table than a claim
    /// could.
    pub(crate) fn hold(&self, tenant: Digest, now: u64, cap: u64) -> Result<(), Unheld> {
        let held = self.table.update(tenant, &Unpartitioned, now, |t| {
            let e = Entry::of(t);
            if e.held >= cap {
                Apply::Keep(false)
            } else {
                let held = e.held + 1;
                Apply::Write(Entry { held, ..e }.tats(), true)
            }
        });
        match held {
            Ok(true) => Ok(()),
            Ok(false) => Err(Unheld::AtCap),
            Err(_) => Err(Unheld::NoEntry),
        }
    }

    /// One identity slot less for the tenant. Its entry is there: it holds the slot.
    pub(crate) fn unhold(&self, tenant: Digest) {
        let found = self.table.update_existing(tenant, |t| {
            let e = Entry::of(t);
            debug_assert!(e.held > 0, "a tenant gives back a slot it does not hold");
            match e.held.checked_sub(1) {
                Some(held) => Apply::Write(Entry { held, ..e }.tats(), ()),
                None => Apply::Keep(()),
            }
        });
        debug_assert!(found.is_some(), "a tenant holding slots has an entry");
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
    fn reserve(&self, now: u64) -> bool {
        let tenant = (self.tenant)();
        self.tenants.hold(tenant, now, self.caps.of(tenant)).is_ok()
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
        let e = |end, count| Entry {
            end,
            count,
            held: 7,
        };
        assert_eq!(window(e(2_000, 3), 2_000, 1_000), (2_000, 3));
        assert_eq!(window(e(3_000, 3), 2_000, 1_000), (3_000, 3), "late");
        assert_eq!(window(e(1_000, 3), 2_000, 1_000), (2_000, 0), "over");
        assert_eq!(window(e(2_500, 3), 2_000, 1_000), (2_000, 0), "other grid");
    }

    #[test]
    fn an_entry_round_trips_and_is_kept_while_it_holds_slots() {
        let e = Entry {
            end: 5,
            count: COUNT_MASK,
            held: 1 << 30,
        };
        assert_eq!(Entry::of(e.tats()), e);
        assert!(!TenantEntries::reclaimable(e.tats(), 10), "holds slots");
        let idle = Entry { held: 0, ..e };
        assert!(TenantEntries::reclaimable(idle.tats(), 10));
        assert!(
            !TenantEntries::reclaimable(idle.tats(), 4),
            "window not over"
        );
        assert_eq!(Entry::of(TenantEntries::fresh(9)).held, 0);
    }

    #[test]
    fn holds_stop_at_the_cap_and_count_back() {
        let t = Tenants::new(64);
        let a = Digest { hi: 1, lo: 3 };
        assert!(t.hold(a, 0, 2).is_ok() && t.hold(a, 0, 2).is_ok());
        assert_eq!(t.hold(a, 0, 2), Err(Unheld::AtCap));
        t.unhold(a);
        assert_eq!(t.held(a), 1);
        assert!(t.hold(a, 0, 2).is_ok());
        assert_eq!(t.held(a), 2);
    }

    /// A give-back returns admissions to the window they were counted in, never more than it
    /// counts, and nothing once the tenant counts in a newer window.
    #[test]
    fn a_give_back_returns_admissions_to_their_own_window_only() {
        let t = Tenants::new(64);
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
        let tenants = Tenants::new(64);
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
        let tenants = Tenants::new(64);
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
        let t = Tenants::new(100);
        assert_eq!(
            t.memory_bytes(),
            100 * 64 + core::mem::size_of::<Table<TenantEntries>>()
        );
    }
}
