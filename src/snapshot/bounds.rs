//! What a restore lets a state file ask for: no more debt than a full bucket of the profile
//! restored into, and for each partition (a tenant, or all anonymous callers) no more of the
//! table than a claim could take, in all (`identities.tenant_share` of the slots) and in any
//! one probing window (the same share of its 64 slots).
//!
//! Claims place identities at slots the keyed hash spreads, so a partition's slots are spread
//! over the table; a file can place any digest anywhere. Without the window bound one partition
//! at its share could fill the first half of the table, and every caller whose home slot is
//! there would find no slot in its window (`TableFull`). With it, any window keeps at least
//! the rest of its slots for other partitions. A real table exceeds it only where a partition
//! near its whole share happens to crowd one window; such a record starts full, counted.

use std::collections::VecDeque;

use super::format::Record;
use crate::config::{ClassConfig, Config};
use crate::identity::Digest;
use crate::table::WINDOW;

/// The most each bucket of a record can owe: a full bucket's debt (`tau`) of its class, or the
/// largest of any class for a record without one. More (a crafted file, or a snapshot taken
/// just after a reload to smaller buckets) is clipped to it, so that no restore locks a caller
/// out for longer than its bucket could.
pub(super) fn most_owed(cfg: &Config, r: &Record) -> (u64, u64) {
    let tau = |c: &ClassConfig| (c.limits.burst.tau, c.limits.sustained.tau);
    match r.class {
        Some(c) => tau(&cfg.classes[usize::from(c)]),
        None => cfg
            .classes
            .iter()
            .map(tau)
            .fold((0, 0), |(b, s), (b2, s2)| (b.max(b2), s.max(s2))),
    }
}

/// The partitions of the slots restored in the last window, and in the first one (a window
/// near the end of the table wraps around to it). Records come in ascending slot order.
pub(super) struct Windows {
    slots: usize,
    recent: VecDeque<(usize, Digest)>,
    first: Vec<(usize, Digest)>,
}

impl Windows {
    pub(super) fn new(slots: usize) -> Windows {
        Windows {
            slots,
            recent: VecDeque::with_capacity(WINDOW),
            first: Vec::new(),
        }
    }

    /// Whether `partition`, whose cap of the whole table is `cap`, may have slot `slot` too:
    /// no window that holds it would then hold more of the partition than `cap`'s share of it.
    pub(super) fn room(&mut self, slot: usize, partition: Digest, cap: u64) -> bool {
        let window = WINDOW.min(self.slots);
        while self
            .recent
            .front()
            .is_some_and(|&(s, _)| s + window <= slot)
        {
            self.recent.pop_front();
        }
        let share = (cap.saturating_mul(window as u64))
            .div_ceil(self.slots as u64)
            .clamp(1, window as u64);
        // The window ending at `slot` is the fullest one that holds it among those seen so far
        // (later records only come after it); past the end it wraps to the first slots.
        let wrapped = (slot + window).saturating_sub(self.slots);
        let held = self.recent.iter().filter(|&&(_, p)| p == partition).count()
            + self
                .first
                .iter()
                .filter(|&&(s, p)| s < wrapped && p == partition)
                .count();
        (held as u64) < share
    }

    /// Records that `slot` was restored for `partition`.
    pub(super) fn restored(&mut self, slot: usize, partition: Digest) {
        self.recent.push_back((slot, partition));
        if slot < WINDOW {
            self.first.push((slot, partition));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_gets_its_share_of_every_window() {
        let (a, b) = (Digest { hi: 1, lo: 1 }, Digest { hi: 2, lo: 3 });
        let mut w = Windows::new(1024);
        // A cap of half the table: 32 of every 64 slots.
        let placed: Vec<usize> = (0..1024)
            .filter(|&s| {
                let ok = w.room(s, a, 512);
                if ok {
                    w.restored(s, a);
                }
                ok
            })
            .collect();
        assert_eq!(&placed[..32], &(0..32).collect::<Vec<_>>()[..]);
        assert!(!placed.contains(&32) && placed.contains(&64));
        // Every window of 64, the wrapped ones too, holds at most 32 of them.
        for start in 0..1024 {
            let n = placed
                .iter()
                .filter(|&&s| (s + 1024 - start) % 1024 < 64)
                .count();
            assert!(n <= 32, "window at {start}: {n}");
        }
        // Another partition is not counted against it.
        assert!(w.room(1023, b, 512));
    }
}
