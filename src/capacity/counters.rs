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
    #[cfg(any(test, tollgate_loom))]
    #[inline]
    pub fn take(&self, window: u64, slots: u64) -> bool {
        self.take_n(window, slots, 1).is_some()
    }

    /// Takes `n` slots in window `window` (or in the shard's newer window), all or none, unless
    /// fewer than `n` of `slots` are left; returns the window id they were counted in (for
    /// [`ShardCounter::give_back`]).
    #[inline]
    pub fn take_n(&self, window: u64, slots: u64, n: u64) -> Option<u64> {
        // Relaxed throughout: the count is the whole state; nothing else is published with it,
        // and the CAS makes every increment see the latest value (no window exceeds `slots`).
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            let (id, used) = Self::current(cur, window);
            if used + n > slots {
                return None;
            }
            let next = id << COUNT_BITS | (used + n);
            match self
                .0
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(id),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Gives back `n` slots taken in the window with id `counted` (what [`ShardCounter::take_n`]
    /// returned). Nothing if the shard has moved on to a newer window: the old one's slots no
    /// longer admit anyone, and giving them back in the new one would hand them out twice.
    pub fn give_back(&self, counted: u64, n: u64) {
        // Relaxed: as in `take_n`, the word is the whole state.
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            if cur >> COUNT_BITS != counted {
                return;
            }
            let next = cur - n.min(cur & COUNT_MASK);
            match self
                .0
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
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

    #[test]
    fn n_slots_all_or_none_and_back() {
        let c = ShardCounter::new();
        assert_eq!(c.take_n(3, 5, 3), Some(3));
        assert_eq!(c.take_n(3, 5, 3), None, "two left: none taken");
        assert_eq!(c.used(3), 3);
        c.give_back(3, 3);
        assert_eq!(c.used(3), 0);
        assert_eq!(c.take_n(3, 5, 5), Some(3));
        assert_eq!(c.take_n(3, 5, 0), Some(3), "zero always fits");
        // Window 4 began: a give-back for window 3 changes nothing.
        assert_eq!(c.take_n(4, 5, 1), Some(4));
        c.give_back(3, 5);
        assert_eq!(c.used(4), 1);
    }

    #[test]
    fn a_give_back_never_takes_more_than_the_window_counts() {
        let c = ShardCounter::new();
        assert_eq!(c.take_n(6, 5, 2), Some(6));
        // More than was counted (a caller's bug): the count stops at zero and the window id
        // is untouched, so window 6 still has all its slots and no later one is disturbed.
        c.give_back(6, 3);
        assert_eq!(c.used(6), 0);
        // A late request of window 5 still counts in window 6 (the shard did not go back).
        assert_eq!(c.take_n(5, 5, 1), Some(6));
        assert_eq!(c.take_n(6, 5, 4), Some(6));
        assert_eq!(c.used(6), 5);
        assert_eq!(c.take_n(6, 5, 1), None);
    }

    #[test]
    fn debug_shows_the_packed_word() {
        let c = ShardCounter::new();
        assert_eq!(c.take_n(3, 5, 2), Some(3));
        assert_eq!(
            format!("{c:?}"),
            format!("ShardCounter({})", 3u64 << 24 | 2)
        );
    }
}
