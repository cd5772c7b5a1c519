//! A retry budget shared by every task of one client (Finagle's `RetryBudget`, tower's
//! `TpsBudget`): retries may be at most `ratio` of the recent logical requests plus a small floor,
//! so a thousand tasks hitting the same outage cannot multiply the load on it.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::clock::{Clock, TokioClock};
use super::lock;

/// Fixed-point unit: one retry costs `SCALE`, one request deposits `floor(ratio * SCALE)`.
/// Rounding the deposit down means the effective ratio is never above the configured one (tower
/// rounds the withdrawal down, which rounds the ratio up: 0.3 becomes 1/3).
const SCALE: i64 = 1_000_000;
/// The TTL window is kept as this many sub-windows; the oldest expires as a whole, so deposits
/// live between `ttl * (SLOTS - 1) / SLOTS` and `ttl`.
const SLOTS: usize = 10;

/// The ring of sub-window sums and where the current one starts.
#[derive(Debug)]
struct Window {
    slots: [i64; SLOTS],
    head: usize,
    head_start: Instant,
}

struct Inner {
    clock: Arc<dyn Clock>,
    slot_len: Duration,
    deposit: i64,
    reserve: i64,
    ratio: f64,
    min_per_sec: u32,
    ttl: Duration,
    // One short critical section per call (a few adds): uncontended it costs about what a CAS
    // loop does, and it keeps check-and-withdraw exact, which a lock-free sum over the slots
    // would not.
    window: Mutex<Window>,
}

/// A handle on one shared retry budget; clones share it (an `Arc`).
///
/// Every logical request [`deposits`](RetryBudget::deposit) `ratio` of a retry; every retry
/// [`withdraws`](RetryBudget::try_withdraw) one. Deposits and withdrawals expire after `ttl`
/// (a sliding window of 10 sub-windows). A constant reserve of `min_per_sec * ttl` retries lets a
/// client with little traffic still retry. So over any `ttl`, retries are at most
/// `ratio * requests + min_per_sec * ttl`.
#[derive(Clone)]
pub struct RetryBudget {
    inner: Arc<Inner>,
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("ttl", &self.inner.ttl)
            .field("min_per_sec", &self.inner.min_per_sec)
            .field("ratio", &self.inner.ratio)
            .field("available", &self.available())
            .finish()
    }
}

impl Default for RetryBudget {
    /// Finagle's defaults: `ttl` 10 s, `min_per_sec` 10, `ratio` 0.2, on [`TokioClock`].
    fn default() -> Self {
        RetryBudget::new(Duration::from_secs(10), 10, 0.2)
    }
}

impl RetryBudget {
    /// A budget on [`TokioClock`]: deposits live for `ttl` (at least 10 ms), `min_per_sec`
    /// retries per second are always allowed, and `ratio` (clamped to `[0, 1000]`, NaN is 0)
    /// retries are earned per logical request.
    pub fn new(ttl: Duration, min_per_sec: u32, ratio: f64) -> Self {
        RetryBudget::with_clock(ttl, min_per_sec, ratio, Arc::new(TokioClock))
    }

    /// As [`RetryBudget::new`], on an injected clock (tests use [`ManualClock`](super::ManualClock)).
    pub fn with_clock(ttl: Duration, min_per_sec: u32, ratio: f64, clock: Arc<dyn Clock>) -> Self {
        let ttl = ttl.max(Duration::from_millis(10));
        let ratio = if ratio.is_nan() {
            0.0
        } else {
            ratio.clamp(0.0, 1000.0)
        };
        // Both products are floored: the budget never allows more than configured.
        let deposit = (ratio * SCALE as f64) as i64;
        let reserve = (f64::from(min_per_sec) * ttl.as_secs_f64() * SCALE as f64) as i64;
        let now = clock.now();
        RetryBudget {
            inner: Arc::new(Inner {
                slot_len: ttl / SLOTS as u32,
                deposit,
                reserve,
                ratio,
                min_per_sec,
                ttl,
                window: Mutex::new(Window {
                    slots: [0; SLOTS],
                    head: 0,
                    head_start: now,
                }),
                clock,
            }),
        }
    }

    /// The TTL of deposits and withdrawals.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// Reserve plus every live sub-window, saturating (a huge `ttl * min_per_sec` must not
    /// overflow).
    fn balance(&self, w: &Window) -> i64 {
        w.slots
            .iter()
            .fold(self.inner.reserve, |acc, s| acc.saturating_add(*s))
    }

    /// Runs `f` on the window after expiring the sub-windows older than `ttl`.
    fn with_window<T>(&self, f: impl FnOnce(&mut Window) -> T) -> T {
        let now = self.inner.clock.now();
        let mut w = lock(&self.inner.window);
        let slot = self.inner.slot_len;
        let passed = now.saturating_duration_since(w.head_start).as_nanos() / slot.as_nanos();
        if passed > 0 {
            let steps = usize::try_from(passed).unwrap_or(usize::MAX).min(SLOTS);
            for _ in 0..steps {
                w.head = (w.head + 1) % SLOTS;
                let head = w.head;
                w.slots[head] = 0;
            }
            // `passed` sub-windows went by; move the start by exactly that many so the grid stays
            // aligned (saturating: a huge jump just restarts the grid at `now`).
            w.head_start = u32::try_from(passed)
                .ok()
                .and_then(|p| slot.checked_mul(p))
                .and_then(|d| w.head_start.checked_add(d))
                .unwrap_or(now);
        }
        f(&mut w)
    }

    /// Records one logical request, earning `ratio` of a retry.
    pub fn deposit(&self) {
        let amount = self.inner.deposit;
        if amount > 0 {
            self.with_window(|w| w.slots[w.head] = w.slots[w.head].saturating_add(amount));
        }
    }

    /// Takes one retry if the budget has it; `false` means do not retry.
    pub fn try_withdraw(&self) -> bool {
        self.with_window(|w| {
            if self.balance(w) >= SCALE {
                w.slots[w.head] -= SCALE;
                true
            } else {
                false
            }
        })
    }

    /// Whole retries available now (for dashboards and tests).
    pub fn available(&self) -> u64 {
        let balance = self.with_window(|w| self.balance(w));
        u64::try_from(balance / SCALE).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    fn budget(ratio: f64, min_per_sec: u32) -> (RetryBudget, ManualClock) {
        let clock = ManualClock::default();
        let b = RetryBudget::with_clock(
            Duration::from_secs(10),
            min_per_sec,
            ratio,
            Arc::new(clock.clone()),
        );
        (b, clock)
    }

    #[test]
    fn ratio_is_not_rounded_up() {
        // tower would allow 1 retry per 3 requests for 0.3 (withdraw = 3); we allow 3 per 10.
        let (b, _) = budget(0.3, 0);
        for _ in 0..10 {
            b.deposit();
        }
        let mut n = 0;
        while b.try_withdraw() {
            n += 1;
        }
        assert_eq!(n, 3);
        for _ in 0..3 {
            b.deposit();
        }
        assert!(!b.try_withdraw(), "0.9 of a retry is not a retry");
    }

    #[test]
    fn floor_is_min_per_sec_times_ttl() {
        let (b, _) = budget(0.0, 2);
        assert_eq!(b.available(), 20);
        let n = (0..100).take_while(|_| b.try_withdraw()).count();
        assert_eq!(n, 20);
    }

    #[test]
    fn extreme_settings_do_not_overflow() {
        let clock = ManualClock::default();
        let b = RetryBudget::with_clock(Duration::MAX, u32::MAX, f64::INFINITY, Arc::new(clock));
        for _ in 0..100 {
            b.deposit();
            assert!(b.try_withdraw());
        }
        assert!(b.available() > 1_000_000);
        let b = RetryBudget::with_clock(
            Duration::ZERO,
            0,
            f64::NAN,
            Arc::new(ManualClock::default()),
        );
        b.deposit();
        assert!(!b.try_withdraw());
        assert_eq!(b.ttl(), Duration::from_millis(10));
    }

    #[test]
    fn deposits_and_withdrawals_expire_after_ttl() {
        let (b, clock) = budget(1.0, 0);
        for _ in 0..5 {
            b.deposit();
        }
        assert_eq!(b.available(), 5);
        clock.advance(Duration::from_secs(5));
        assert!(b.try_withdraw());
        assert_eq!(b.available(), 4);
        // The deposits expire first; the withdrawal made 5 s later still counts.
        clock.advance(Duration::from_millis(5_500));
        assert_eq!(b.available(), 0);
        assert!(!b.try_withdraw());
        clock.advance(Duration::from_secs(5));
        for _ in 0..2 {
            b.deposit();
        }
        assert_eq!(b.available(), 2);
        // A jump of many windows clears everything.
        clock.advance(Duration::from_secs(3600));
        assert_eq!(b.available(), 0);
    }
}
