//! Capped exponential backoff with full, equal or decorrelated jitter.

use std::time::Duration;

use super::saturating_nanos as nanos;

/// How a backoff delay is randomized; `exp` below is `min(cap, base * 2^retry)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Jitter {
    /// `random(0, exp)`: the widest spread, least total work for the server (the default).
    #[default]
    Full,
    /// `exp / 2 + random(0, exp / 2)`: keeps at least half of the exponential wait.
    Equal,
    /// `random(base, prev * 3)`, `prev` starting at `base`: grows from the previous delay instead
    /// of the retry count.
    Decorrelated,
    /// `exp` exactly: only for tests and single clients, it synchronizes a crowd.
    None,
}

/// Capped exponential backoff with jitter, as defined in the AWS Architecture Blog post
/// "Exponential Backoff And Jitter" (Marc Brooker, 2015).
///
/// Jitter spreads clients that failed together so they do not come back together; the cap keeps a
/// long outage from growing waits without bound; the floor keeps full jitter from retrying after a
/// few microseconds.
///
/// Configuration: base, cap, floor and jitter. Cheap to copy; holds no state, the
/// per-request state is the retry index and previous delay passed to [`Backoff::delay`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    floor: Duration,
    jitter: Jitter,
}

impl Default for Backoff {
    /// Base 100 ms, cap 10 s, floor 10 ms, full jitter.
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
            floor: Duration::from_millis(10),
            jitter: Jitter::Full,
        }
    }
}

impl Backoff {
    /// Full-jitter backoff from `base` doubling up to `cap`, no floor. A `cap` below `base` is
    /// raised to `base`, so the range is never empty.
    pub fn new(base: Duration, cap: Duration) -> Self {
        Backoff {
            base,
            cap: cap.max(base),
            floor: Duration::ZERO,
            jitter: Jitter::Full,
        }
    }

    /// Sets the jitter strategy.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Sets the smallest delay ever returned (clamped to the cap), so jitter never yields a
    /// near-zero wait that hammers the server again at once.
    pub fn with_floor(mut self, floor: Duration) -> Self {
        self.floor = floor.min(self.cap);
        self
    }

    /// The first delay before jitter.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The largest delay ever returned, applied after jitter.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// The smallest delay ever returned.
    pub fn floor(&self) -> Duration {
        self.floor
    }

    /// The jitter strategy.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// `min(cap, base * 2^retry)` without jitter: the upper end of full jitter's range.
    pub fn exponential(&self, retry: u32) -> Duration {
        let exp = nanos(self.base).saturating_mul(1u64.checked_shl(retry).unwrap_or(u64::MAX));
        Duration::from_nanos(exp).min(self.cap)
    }

    /// The delay before retry number `retry` (0 = the first retry), always in `[floor, cap]`.
    ///
    /// `prev` is the previous delay this request waited (only decorrelated jitter reads it; pass
    /// [`Backoff::base`] or anything for the first retry: decorrelated jitter starts at `base`
    /// when `retry == 0`).
    pub fn delay(&self, retry: u32, prev: Duration, rng: &mut fastrand::Rng) -> Duration {
        let d = match self.jitter {
            Jitter::None => self.exponential(retry),
            Jitter::Full => Duration::from_nanos(rng.u64(0..=nanos(self.exponential(retry)))),
            Jitter::Equal => {
                let exp = nanos(self.exponential(retry));
                let half = exp / 2;
                Duration::from_nanos(half + rng.u64(0..=exp - half))
            }
            Jitter::Decorrelated => {
                let prev = if retry == 0 { self.base } else { prev };
                let lo = nanos(self.base);
                let hi = nanos(prev).saturating_mul(3).max(lo);
                Duration::from_nanos(rng.u64(lo..=hi))
            }
        };
        // The cap is applied after jitter (decorrelated jitter can draw above it); the floor
        // is at most the cap, so the result is in [floor, cap].
        d.max(self.floor).min(self.cap)
    }

    /// An endless iterator of delays for one request, drawing from `rng`.
    pub fn delays(self, rng: fastrand::Rng) -> Delays {
        Delays {
            backoff: self,
            rng,
            retry: 0,
            prev: self.base,
        }
    }
}

/// The successive delays of one request; see [`Backoff::delays`].
#[derive(Clone, Debug)]
pub struct Delays {
    backoff: Backoff,
    rng: fastrand::Rng,
    retry: u32,
    prev: Duration,
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let d = self.backoff.delay(self.retry, self.prev, &mut self.rng);
        self.retry = self.retry.saturating_add(1);
        self.prev = d;
        Some(d)
    }
}
