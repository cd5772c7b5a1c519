//! Shared capacity: each shard has `slots_per_window` admission slots per fixed window, and no
//! tenant holds more than its cap of its shard's slots in one window.
//!
//! Windows are **fixed** (aligned to the limiter's clock), not sliding: a fixed window is one
//! word per shard and per tenant, exact under concurrency, and its end is the same instant for
//! every caller, so a 503's Retry-After (time to the next window) says nothing about anyone's
//! usage. The cost is the known edge effect: up to twice the slots can pass in one window's
//! length straddling a boundary. The per-identity buckets, which are exact at every instant,
//! bound each caller; the shard ceiling bounds the sum per window.
//!
//! A shard's count is one atomic word; a tenant's count in its shard's window lives in an
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
/// The most slots a shard may have per window.
pub const MAX_SLOTS_PER_WINDOW: u64 = COUNT_MASK;

/// One shard's admissions in the current window: `window_id << 24 | count`.
#[repr(align(64))] // Shards are hot and written by every admission: one line each.
pub(crate) struct ShardCounter(AtomicU64);

impl ShardCounter {
    pub(crate) fn new() -> Self {
        ShardCounter(AtomicU64::new(0))
    }

    /// Slots used in window `window`.
    pub(crate) fn used(&self, window: u64) -> u64 {
        // Relaxed: a peek; the word itself is all that is read.
        let w = self.0.load(Ordering::Relaxed);
        if w >> COUNT_BITS == window & (u64::MAX >> COUNT_BITS) {
            w & COUNT_MASK
        } else {
            0
        }
    }

    /// Takes a slot in window `window` unless `slots` are used.
    pub(crate) fn take(&self, window: u64, slots: u64) -> bool {
        let id = window & (u64::MAX >> COUNT_BITS);
        // Relaxed throughout: the count is the whole state; nothing else is published with it,
        // and the CAS makes every increment see the latest value (no window exceeds `slots`).
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            let used = if cur >> COUNT_BITS == id { cur & COUNT_MASK } else { 0 };
            if used >= slots {
                return false;
            }
            let next = id << COUNT_BITS | (used + 1);
            match self.0.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// A tenant's count kept in an identity-table slot: the burst TAT holds the window's end (so
/// the slot is reclaimable once the window is over, like a refilled bucket) and the sustained
/// TAT the count.
fn tenant_used(t: Tats, window_end: u64) -> u64 {
    if t.burst == window_end {
        t.sustained
    } else {
        0
    }
}

/// The current window of `window_ns` at `now`: (id, end).
#[inline]
pub(crate) fn window(now: u64, window_ns: u64) -> (u64, u64) {
    let id = now / window_ns;
    (id, (id + 1) * window_ns)
}

/// Slots the tenant holds in the window ending at `window_end` (for `peek`).
pub(crate) fn tenant_held(table: &Table, tenant: Digest, now: u64, window_end: u64) -> u64 {
    table.peek(tenant, now).map_or(0, |t| tenant_used(t, window_end))
}

/// Takes one of the tenant's slots unless it holds `cap`. `Err` names the refusal.
pub(crate) fn take_tenant(
    table: &Table,
    tenant: Digest,
    now: u64,
    window_end: u64,
    cap: u64,
) -> Result<(), Cause> {
    let taken = table.update(tenant, now, |t| {
        let used = tenant_used(t, window_end);
        if used >= cap {
            Apply::Keep(false)
        } else {
            Apply::Write(Tats { burst: window_end, sustained: used + 1 }, true)
        }
    });
    match taken {
        Ok(true) => Ok(()),
        Ok(false) => Err(Cause::TenantShare),
        Err(_) => Err(Cause::TableFull),
    }
}

/// Gives back a tenant slot taken in the window ending at `window_end`.
pub(crate) fn give_back_tenant(table: &Table, tenant: Digest, now: u64, window_end: u64) {
    let _ = table.update(tenant, now, |t| match tenant_used(t, window_end) {
        0 => Apply::Keep(()),
        used => Apply::Write(Tats { burst: window_end, sustained: used - 1 }, ()),
    });
}
