//! The server's clock as seen from a worker: a conservative estimate of its offset, so that a
//! charging call can carry a deadline on the server's clock (see [`ServerClock`]).

use crate::sync::unmodelled::{AtomicU64, Ordering};
use core::time::Duration;
use std::time::Instant;

/// A conservative estimate of `server time - local time` (both in microseconds; local time is
/// a monotonic clock from `base`): the largest lower bound seen. A reply stamped `s` by the
/// server to a call sent at local `l0` and answered at `l1` means the offset is within
/// `[s - l1, s - l0]` (the server ran the script in between); the estimate only grows with new
/// lower bounds, except that a sample whose upper bound is below it (the server's clock stepped
/// back, or another server answers after a failover) replaces it. Never above the true offset
/// while the clocks hold still, so a deadline computed with it is never later than the
/// caller's own.
pub(super) struct ServerClock {
    base: Instant,
    /// The estimate; 0 until the first sample (then no deadline is sent).
    offset: AtomicU64,
}

impl ServerClock {
    pub(super) fn new() -> ServerClock {
        ServerClock {
            base: Instant::now(),
            offset: AtomicU64::new(0),
        }
    }

    /// Microseconds on the local monotonic clock since this estimate began.
    pub(super) fn local_micros(&self) -> u64 {
        self.base.elapsed().as_micros() as u64
    }

    /// Learns from one reply: the server's time `server` for a call sent at `sent` and answered
    /// at `answered` (local microseconds).
    pub(super) fn observe(&self, server: u64, sent: u64, answered: u64) {
        let (lo, hi) = (server.saturating_sub(answered), server.saturating_sub(sent));
        let mut cur = self.offset.load(Ordering::Relaxed);
        loop {
            let next = if cur > hi { lo } else { cur.max(lo) };
            if next == cur {
                return;
            }
            match self
                .offset
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    /// The server time at local microseconds `local`, as estimated (no later than the truth
    /// while the clocks hold still); 0 before the first sample.
    pub(super) fn server_micros(&self, local: u64) -> u64 {
        // Relaxed: the estimate is read on its own, as in `deadline`.
        match self.offset.load(Ordering::Relaxed) {
            0 => 0,
            offset => offset + local,
        }
    }

    /// The server time after which a call sent at local `sent`, whose caller gives up `budget`
    /// later, must charge nothing: `sent + budget` on the server's clock, less a tenth of the
    /// budget for the reply's way back. 0 (no deadline) before the first sample.
    pub(super) fn deadline(&self, sent: u64, budget: Duration) -> u64 {
        let offset = self.offset.load(Ordering::Relaxed);
        if offset == 0 {
            return 0;
        }
        let budget = budget.as_micros() as u64;
        offset + sent + budget - budget / 10
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock() -> ServerClock {
        ServerClock::new()
    }

    #[test]
    fn offset_keeps_the_largest_lower_bound() {
        let c = clock();
        assert_eq!(
            c.deadline(5, Duration::from_millis(50)),
            0,
            "no sample, no deadline"
        );
        // Sent at 100, answered at 300, stamped 1_000_250: offset in [999_950, 1_000_150].
        c.observe(1_000_250, 100, 300);
        assert_eq!(c.offset.load(Ordering::Relaxed), 999_950);
        // A slower sample (lower lower bound) changes nothing; a faster one raises it.
        c.observe(1_001_000, 1_000, 2_000);
        assert_eq!(c.offset.load(Ordering::Relaxed), 999_950);
        c.observe(1_002_040, 2_000, 2_050);
        assert_eq!(c.offset.load(Ordering::Relaxed), 999_990);
        // Deadline: sent + offset + 50 ms less a tenth.
        assert_eq!(
            c.deadline(3_000, Duration::from_millis(50)),
            3_000 + 999_990 + 45_000
        );
    }

    #[test]
    fn a_sample_below_the_estimate_replaces_it() {
        let c = clock();
        c.observe(20_000_250, 100, 300);
        assert_eq!(c.offset.load(Ordering::Relaxed), 19_999_950);
        // The server's clock stepped back 10 s: this sample's upper bound is below the estimate.
        c.observe(10_000_500, 400, 500);
        assert_eq!(c.offset.load(Ordering::Relaxed), 10_000_000);
    }
}
