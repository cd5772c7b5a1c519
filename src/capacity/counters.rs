//! A shard's counter of shared capacity (a tenant's count lives in the tenants' table,
//! `tenants.rs`).

use crate::sync::{AtomicU64, Ordering};

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

#[cfg(all(test, not(tollgate_loom)))]
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
}
