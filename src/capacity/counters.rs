//! The two counters of shared capacity: a shard's word, and a tenant's count kept in an
//! identity-table slot of its own (the tenant's digest), so tenants need no table of their own
//! and are bounded by the same fail-closed capacity.

use crate::bucket::Tats;
use crate::decision::Cause;
use crate::identity::Digest;
use crate::sync::{AtomicU64, Ordering};
use crate::table::{Apply, Table};

/// Window ids keep 40 bits (34 years of 1 ms windows); counts 24 bits.
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
// A shard's slots per window (the profile's `Slots`, at most `MAX_SLOTS_PER_WINDOW`) fit
// in the count bits.
const _: () = assert!(crate::profile::MAX_SLOTS_PER_WINDOW == COUNT_MASK);

/// One shard's admissions in the current window: `window_id << 24 | count`.
///
/// Windows only move forward. A request whose clock reading falls in a window the shard has
/// already left (it read the clock, then lost the CPU across the boundary) is counted in the
/// shard's newer window, never by resetting it: resetting would hand the newer window's slots
/// out twice.
#[repr(align(64))] // Shards are hot and written by every admission: one line each.
pub struct ShardCounter(AtomicU64);

impl core::fmt::Debug for ShardCounter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("ShardCounter")
            .field(&self.0.load(Ordering::Relaxed))
            .finish()
    }
}

impl Default for ShardCounter {
    fn default() -> Self {
        ShardCounter::new()
    }
}

impl ShardCounter {
    /// An unused counter.
    pub fn new() -> Self {
        ShardCounter(AtomicU64::new(0))
    }

    /// The window this word counts in for a request in `window`, and what it has used.
    #[inline]
    fn current(word: u64, window: u64) -> (u64, u64) {
        let id = window & (u64::MAX >> COUNT_BITS);
        match (word >> COUNT_BITS).cmp(&id) {
            core::cmp::Ordering::Less => (id, 0),
            _ => (word >> COUNT_BITS, word & COUNT_MASK),
        }
    }

    /// Slots used in window `window` (or in the shard's newer window).
    pub fn used(&self, window: u64) -> u64 {
        // Relaxed: a peek; the word itself is all that is read.
        Self::current(self.0.load(Ordering::Relaxed), window).1
    }

    /// Takes a slot in window `window` (or in the shard's newer window) unless `slots` are used.
    pub fn take(&self, window: u64, slots: u64) -> bool {
        // Relaxed throughout: the count is the whole state; nothing else is published with it,
        // and the CAS makes every increment see the latest value (no window exceeds `slots`).
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            let (id, used) = Self::current(cur, window);
            if used >= slots {
                return false;
            }
            let next = id << COUNT_BITS | (used + 1);
            match self
                .0
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// A tenant's count kept in an identity-table slot: the burst TAT holds the window's end (so
/// the slot is reclaimable once the window is over, like a refilled bucket) and the sustained
/// TAT the count. Returns (the window end counted in, used): a stored window later than ours
/// on the same grid is the tenant's newer window (we are late), anything else is over.
fn tenant_window(t: Tats, window_end: u64, window_ns: u64) -> (u64, u64) {
    // Equality first: the common case, and it spares the division.
    let same_or_newer =
        t.burst == window_end || (t.burst > window_end && (t.burst - window_end) % window_ns == 0);
    if same_or_newer {
        (t.burst, t.sustained)
    } else {
        (window_end, 0)
    }
}

/// Slots the tenant holds in the window ending at `window_end` (for `peek`).
pub(super) fn tenant_held(
    table: &Table,
    tenant: Digest,
    now: u64,
    window_end: u64,
    window_ns: u64,
) -> u64 {
    table
        .peek(tenant, now)
        .map_or(0, |t| tenant_window(t, window_end, window_ns).1)
}

/// Takes one of the tenant's slots unless it holds `cap`; returns the end of the window it was
/// counted in (for `give_back_tenant`), or the refusal.
pub(super) fn take_tenant(
    table: &Table,
    tenant: Digest,
    now: u64,
    (window_end, window_ns): (u64, u64),
    cap: u64,
) -> Result<u64, Cause> {
    let taken = table.update(tenant, now, |t| {
        let (end, used) = tenant_window(t, window_end, window_ns);
        if used >= cap {
            Apply::Keep(None)
        } else {
            Apply::Write(
                Tats {
                    burst: end,
                    sustained: used + 1,
                },
                Some(end),
            )
        }
    });
    match taken {
        Ok(Some(end)) => Ok(end),
        Ok(None) => Err(Cause::TenantShare),
        Err(_) => Err(Cause::TableFull),
    }
}

/// Gives back a tenant slot taken in the window ending at `counted_end`.
pub(super) fn give_back_tenant(table: &Table, tenant: Digest, now: u64, counted_end: u64) {
    let _ = table.update(tenant, now, |t| {
        if t.burst == counted_end && t.sustained > 0 {
            Apply::Write(
                Tats {
                    burst: counted_end,
                    sustained: t.sustained - 1,
                },
                (),
            )
        } else {
            Apply::Keep(())
        }
    });
}

#[cfg(all(test, not(all(tollgate_loom, feature = "loom"))))]
mod tests {
    use super::*;

    #[test]
    fn a_late_request_counts_in_the_newer_window() {
        let c = ShardCounter::new();
        assert!(c.take(7, 1));
        assert!(c.take(8, 1));
        // A request that read the clock in window 7 arrives after window 8 began: it must not
        // reset window 8's count.
        assert!(!c.take(7, 1));
        assert!(!c.take(8, 1));
        assert_eq!(c.used(7), 1);
        assert!(c.take(9, 1));
    }

    #[test]
    fn tenant_windows_move_forward_on_their_grid() {
        let t = |end, n| Tats {
            burst: end,
            sustained: n,
        };
        assert_eq!(tenant_window(t(2_000, 3), 2_000, 1_000), (2_000, 3));
        assert_eq!(
            tenant_window(t(3_000, 3), 2_000, 1_000),
            (3_000, 3),
            "late request"
        );
        assert_eq!(
            tenant_window(t(1_000, 3), 2_000, 1_000),
            (2_000, 0),
            "window over"
        );
        assert_eq!(
            tenant_window(t(2_500, 3), 2_000, 1_000),
            (2_000, 0),
            "other grid"
        );
    }
}
