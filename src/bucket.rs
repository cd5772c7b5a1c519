//! Bucket math: GCRA on integer nanoseconds, pure functions, no atomics.
//!
//! A token bucket of `tokens` per `per` is kept as its *theoretical arrival time* (TAT): the
//! instant at which the bucket would be full again. One token is worth the emission interval
//! `t = ceil(per / tokens)` ns and the bucket holds `tau = t * tokens` ns of credit. A request at
//! `now` fits if `max(tat, now) + t <= now + tau`; it then moves the TAT to `max(tat, now) + t`.
//! Nothing is ever rounded per request, so nothing drifts; an idle bucket (`tat <= now`) is
//! exactly full. Rounding `t` up to a whole nanosecond makes the rate at most `tokens / per`
//! (never more), so for every interval `[t0, t1]` admissions are at most
//! `tokens + floor((t1 - t0) / t) <= tokens + floor((t1 - t0) * tokens / per)`.

use core::time::Duration;

use crate::decision::{BucketKind, Decision};

// The bounds the profile's scalars enforce. Times are kept as 60-bit nanoseconds (see
// `table`), and a TAT never runs more than one `tau` (of the profile that charged it, at most
// `MAX_PERIOD_NANOS` plus one token's rounding) ahead of the clock.
use crate::profile::{MAX_PERIOD_NANOS, MAX_TOKENS};

/// One bucket's rate, in the integers the hot path uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rate {
    /// Emission interval: nanoseconds one token is worth, `ceil(per / tokens)`.
    pub(crate) t: u64,
    /// Burst tolerance: nanoseconds of credit a full bucket holds, `t * tokens`.
    pub(crate) tau: u64,
}

impl Rate {
    /// `tokens` per `per_nanos`. Callers validated `1 <= tokens <= MAX_TOKENS` and
    /// `1 <= per_nanos <= MAX_PERIOD_NANOS`, so neither division nor product overflows.
    pub(crate) fn new(tokens: u64, per_nanos: u64) -> Rate {
        debug_assert!((1..=MAX_TOKENS).contains(&tokens));
        debug_assert!((1..=MAX_PERIOD_NANOS).contains(&per_nanos));
        let t = per_nanos.div_ceil(tokens);
        Rate { t, tau: t * tokens }
    }

    /// The TAT after one more request at `now`, or the wait until that request would fit.
    #[inline]
    pub(crate) fn charge(self, tat: u64, now: u64) -> Result<u64, u64> {
        let next = tat.max(now) + self.t;
        let limit = now + self.tau;
        if next <= limit {
            Ok(next)
        } else {
            Err(next - limit)
        }
    }

    /// Whole tokens left at `now` in a bucket at `tat`.
    #[inline]
    pub(crate) fn remaining(self, tat: u64, now: u64) -> u64 {
        let debt = tat.saturating_sub(now).min(self.tau);
        (self.tau - debt) / self.t
    }
}

/// Both buckets of one identity and route class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) burst: Rate,
    pub(crate) sustained: Rate,
}

/// The TATs of an identity's two buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tats {
    pub(crate) burst: u64,
    pub(crate) sustained: u64,
}

impl Tats {
    /// Both buckets full at `now`: a fresh identity, or one idle long enough.
    #[inline]
    pub(crate) fn full(now: u64) -> Tats {
        Tats {
            burst: now,
            sustained: now,
        }
    }

    /// True when both buckets are full at `now`, so the identity is indistinguishable from a
    /// new one and its slot may be reclaimed.
    #[inline]
    pub(crate) fn is_full(self, now: u64) -> bool {
        self.burst <= now && self.sustained <= now
    }
}

/// Why a request does not fit: the exact wait and the bucket that needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Short {
    pub(crate) wait: u64,
    pub(crate) bucket: BucketKind,
}

impl Short {
    /// The 429 this shortfall gives: the exact wait and the bucket that needs it.
    #[inline]
    pub(crate) fn throttle(self) -> Decision {
        Decision::Throttle {
            retry_after: Duration::from_nanos(self.wait),
            bucket: self.bucket,
        }
    }
}

impl Limits {
    /// Gives back the token an admit took (when shared capacity then refused). Exact: the
    /// charge moved each TAT to `max(tat, now) + t` and this moves it back by `t`; charges by
    /// other requests in between commute with it.
    #[inline]
    pub(crate) fn refund(self, tats: Tats) -> Tats {
        Tats {
            burst: tats.burst.saturating_sub(self.burst.t),
            sustained: tats.sustained.saturating_sub(self.sustained.t),
        }
    }

    /// Charges one token to both buckets, or neither: a request fits only if both have a token.
    /// The wait is the longest of the buckets that are short (a tie names `Sustained`, the one
    /// that will stay short longer once the burst refills).
    #[inline]
    pub(crate) fn charge(self, tats: Tats, now: u64) -> Result<Tats, Short> {
        match (
            self.burst.charge(tats.burst, now),
            self.sustained.charge(tats.sustained, now),
        ) {
            (Ok(burst), Ok(sustained)) => Ok(Tats { burst, sustained }),
            (Err(wait), Ok(_)) => Err(Short {
                wait,
                bucket: BucketKind::Burst,
            }),
            (Ok(_), Err(wait)) => Err(Short {
                wait,
                bucket: BucketKind::Sustained,
            }),
            (Err(b), Err(s)) if b > s => Err(Short {
                wait: b,
                bucket: BucketKind::Burst,
            }),
            (Err(_), Err(s)) => Err(Short {
                wait: s,
                bucket: BucketKind::Sustained,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_exact_refill() {
        let r = Rate::new(3, 3_000); // one token per 1000 ns
        let mut tat = 0;
        for _ in 0..3 {
            tat = r.charge(tat, 0).unwrap();
        }
        assert_eq!(r.charge(tat, 0), Err(1_000));
        assert_eq!(r.charge(tat, 999), Err(1));
        assert_eq!(r.remaining(tat, 999), 0);
        assert_eq!(r.remaining(tat, 1_000), 1);
        assert_eq!(r.remaining(tat, 10_000), 3);
        assert!(r.charge(tat, 1_000).is_ok());
    }

    #[test]
    fn emission_interval_rounds_up() {
        let r = Rate::new(3, 1_000);
        assert_eq!(r, Rate { t: 334, tau: 1_002 });
    }

    #[test]
    fn both_or_neither() {
        let l = Limits {
            burst: Rate::new(2, 100),
            sustained: Rate::new(3, 3_000),
        };
        let mut tats = Tats::full(0);
        tats = l.charge(tats, 0).unwrap();
        tats = l.charge(tats, 0).unwrap();
        // The burst is empty; the sustained bucket would have had a token.
        assert_eq!(
            l.charge(tats, 0),
            Err(Short {
                wait: 50,
                bucket: BucketKind::Burst
            })
        );
        tats = l.charge(tats, 100).unwrap();
        // Now the burst has a token but the sustained credit is spent: nothing is charged.
        assert_eq!(
            l.charge(tats, 100),
            Err(Short {
                wait: 900,
                bucket: BucketKind::Sustained
            })
        );
        assert!(l.charge(tats, 999).is_err());
        assert!(l.charge(tats, 1_000).is_ok());
    }

    /// Both buckets short: the wait is the longer one's and names it; a tie names `Sustained`.
    /// (Kills the cargo-mutants survivor `replace match guard b > s with false`.)
    #[test]
    fn both_short_names_the_longer_wait() {
        let l = Limits {
            burst: Rate::new(1, 1_000),
            sustained: Rate::new(1, 100),
        };
        let empty = Tats {
            burst: 1_000,
            sustained: 100,
        };
        let short = |wait, bucket| Err(Short { wait, bucket });
        assert_eq!(l.charge(empty, 0), short(1_000, BucketKind::Burst));
        let l = Limits {
            burst: Rate::new(1, 100),
            sustained: Rate::new(1, 1_000),
        };
        let empty = Tats {
            burst: 100,
            sustained: 1_000,
        };
        assert_eq!(l.charge(empty, 0), short(1_000, BucketKind::Sustained));
        let tie = Limits {
            burst: Rate::new(1, 100),
            sustained: Rate::new(1, 100),
        };
        let empty = Tats {
            burst: 100,
            sustained: 100,
        };
        assert_eq!(tie.charge(empty, 0), short(100, BucketKind::Sustained));
    }
}
