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
//!
//! A weighted request of `n` tokens costs `n * t` ns: it fits if
//! `max(tat, now) + n * t <= now + tau`, so a cost of more than `tokens` (`n * t > tau`) never
//! fits, and is refused apart ([`Limits::cost`]) instead of with a wait that would never come.
//! The bound above holds with admissions counted in tokens.
//!
//! A reload carries debt over in tokens ([`Rate::convert`]): what a bucket owes at the reload's
//! instant, `tat - at` ns of the old emission interval, is owed in the same number of tokens
//! of the new one, rounded up to a whole nanosecond (never down: a conversion never grants).

use core::time::Duration;

use crate::decision::{BucketKind, Decision};

// The bounds the profile's scalars enforce. Times are kept as 59-bit nanoseconds (see
// `table`), and a charge never moves a TAT more than one `tau` (of the profile that charged it,
// at most `MAX_PERIOD_NANOS` plus one token's rounding) ahead of the clock; a reload's
// conversion at most `DEBT_CAP`.
use crate::profile::{MAX_PERIOD_NANOS, MAX_TOKENS};

/// The most a conversion leaves a bucket owing, in ns (2^56, 2.28 years): the state word has
/// room for this much debt ahead of the clock. Above every bucket's `tau` (a year and 4.3 s
/// at most), so only a conversion from a fast class to one of a token in months can reach it.
pub(crate) const DEBT_CAP: u64 = 1 << 56;

/// A debt of `debt` ns counted in emission interval `from`, owed in the same tokens under
/// `to`: `ceil(debt * to / from)` ns, capped at [`DEBT_CAP`] (the same debt if the intervals
/// are equal). `from` is at least 1 (a validated profile's, or a snapshot's, checked).
#[inline]
pub(crate) fn debt_in(debt: u64, from: u64, to: u64) -> u64 {
    if from == to {
        return debt;
    }
    let owed = u128::from(debt) * u128::from(to);
    owed.div_ceil(u128::from(from)).min(u128::from(DEBT_CAP)) as u64
}

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

    /// The cost of `n` tokens in ns (`n * t`), or `None` if the bucket can never hold it
    /// (`n > tokens`; `n * t` is computed without overflow, checked).
    #[inline]
    pub(crate) fn cost(self, n: u32) -> Option<u64> {
        u64::from(n)
            .checked_mul(self.t)
            .filter(|&cost| cost <= self.tau)
    }

    /// The TAT after one more request of `cost` ns (at most `tau`: see [`Rate::cost`]) at
    /// `now`, or the wait until that request would fit.
    #[inline]
    pub(crate) fn charge(self, tat: u64, now: u64, cost: u64) -> Result<u64, u64> {
        debug_assert!(cost <= self.tau);
        let next = tat.max(now) + cost;
        let limit = now + self.tau;
        if next <= limit {
            Ok(next)
        } else {
            Err(next - limit)
        }
    }

    /// The TAT under `to` of a bucket at `tat` under this rate, a reload to `to` taking effect
    /// at `at`: the debt at `at`, `tat - at` ns, is `(tat - at) / t` tokens, owed under `to` as
    /// `ceil((tat - at) * to.t / t)` ns, capped at [`DEBT_CAP`]. A bucket full at `at`
    /// (`tat <= at`) owes nothing under any rate and is kept as it is.
    #[inline]
    pub(crate) fn convert(self, to: Rate, tat: u64, at: u64) -> u64 {
        if tat <= at {
            return tat;
        }
        at + debt_in(tat - at, self.t, to.t)
    }

    /// Whole tokens left at `now` in a bucket at `tat`.
    #[inline]
    pub(crate) fn remaining(self, tat: u64, now: u64) -> u64 {
        let debt = tat.saturating_sub(now).min(self.tau);
        (self.tau - debt) / self.t
    }
}

/// What one request costs each bucket, in nanoseconds of credit: `n * t` of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cost {
    pub(crate) burst: u64,
    pub(crate) sustained: u64,
}

impl Cost {
    /// Gives back what a charge of this cost took (when shared capacity, or another key of the
    /// same request, then refused). Exact: the charge moved each TAT to `max(tat, now) + cost`
    /// and this moves it back by the cost; charges by other requests in between commute with it.
    #[inline]
    pub(crate) fn refund(self, tats: Tats) -> Tats {
        Tats {
            burst: tats.burst.saturating_sub(self.burst),
            sustained: tats.sustained.saturating_sub(self.sustained),
        }
    }
}

/// Both buckets of one identity and route class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) burst: Rate,
    pub(crate) sustained: Rate,
}

impl Limits {
    /// Both TATs converted to `to` as of `at` ([`Rate::convert`]).
    #[inline]
    pub(crate) fn convert(self, to: Limits, tats: Tats, at: u64) -> Tats {
        Tats {
            burst: self.burst.convert(to.burst, tats.burst, at),
            sustained: self.sustained.convert(to.sustained, tats.sustained, at),
        }
    }
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
    /// One token of each bucket: what [`Limiter::admit`](crate::Limiter::admit) charges.
    #[inline]
    pub(crate) fn unit(self) -> Cost {
        Cost {
            burst: self.burst.t,
            sustained: self.sustained.t,
        }
    }

    /// `n` tokens of each bucket, or the bucket that can never hold `n` (where both are too
    /// small, the one with fewer tokens: it bounds the largest cost the class admits).
    #[inline]
    pub(crate) fn cost(self, n: u32) -> Result<Cost, BucketKind> {
        match (self.burst.cost(n), self.sustained.cost(n)) {
            (Some(burst), Some(sustained)) => Ok(Cost { burst, sustained }),
            (None, Some(_)) => Err(BucketKind::Burst),
            (Some(_), None) => Err(BucketKind::Sustained),
            (None, None)
                if self.burst.tau / self.burst.t <= self.sustained.tau / self.sustained.t =>
            {
                Err(BucketKind::Burst)
            }
            (None, None) => Err(BucketKind::Sustained),
        }
    }

    /// Charges `cost` to both buckets, or neither: a request fits only if both hold it.
    /// The wait is the longest of the buckets that are short (a tie names `Sustained`, the one
    /// that will stay short longer once the burst refills).
    #[inline]
    pub(crate) fn charge(self, tats: Tats, now: u64, cost: Cost) -> Result<Tats, Short> {
        match (
            self.burst.charge(tats.burst, now, cost.burst),
            self.sustained.charge(tats.sustained, now, cost.sustained),
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
            tat = r.charge(tat, 0, r.t).unwrap();
        }
        assert_eq!(r.charge(tat, 0, r.t), Err(1_000));
        assert_eq!(r.charge(tat, 999, r.t), Err(1));
        assert_eq!(r.remaining(tat, 999), 0);
        assert_eq!(r.remaining(tat, 1_000), 1);
        assert_eq!(r.remaining(tat, 10_000), 3);
        assert!(r.charge(tat, 1_000, r.t).is_ok());
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
        tats = l.charge(tats, 0, l.unit()).unwrap();
        tats = l.charge(tats, 0, l.unit()).unwrap();
        // The burst is empty; the sustained bucket would have had a token.
        assert_eq!(
            l.charge(tats, 0, l.unit()),
            Err(Short {
                wait: 50,
                bucket: BucketKind::Burst
            })
        );
        tats = l.charge(tats, 100, l.unit()).unwrap();
        // Now the burst has a token but the sustained credit is spent: nothing is charged.
        assert_eq!(
            l.charge(tats, 100, l.unit()),
            Err(Short {
                wait: 900,
                bucket: BucketKind::Sustained
            })
        );
        assert!(l.charge(tats, 999, l.unit()).is_err());
        assert!(l.charge(tats, 1_000, l.unit()).is_ok());
    }

    #[test]
    fn weighted_cost_fits_exactly_or_never() {
        let r = Rate::new(4, 4_000); // t = 1000, tau = 4000
        assert_eq!(r.cost(0), Some(0));
        assert_eq!(r.cost(4), Some(4_000));
        assert_eq!(r.cost(5), None, "more than the bucket holds");
        // n = 4 from full, then 1 more needs 1000 ns; 3 at 2000 ns needs 1000 more.
        let tat = r.charge(0, 0, 4_000).unwrap();
        assert_eq!(tat, 4_000);
        assert_eq!(r.charge(tat, 0, 1_000), Err(1_000));
        assert_eq!(r.charge(tat, 2_000, 3_000), Err(1_000));
        assert_eq!(r.charge(tat, 3_000, 3_000), Ok(7_000));
        // An idle bucket holds `tau`, not more: a full charge at any later time fits exactly.
        assert_eq!(r.charge(tat, 1 << 40, 4_000), Ok((1 << 40) + 4_000));
    }

    #[test]
    fn cost_overflow_is_checked_not_wrapped() {
        // The largest emission interval the profile allows: one token per MAX_PERIOD_NANOS.
        let r = Rate::new(1, MAX_PERIOD_NANOS);
        assert_eq!(r.cost(1), Some(MAX_PERIOD_NANOS));
        // u32::MAX * t (about 1.4e26) overflows a u64: `checked_mul` refuses it, no wrap.
        assert_eq!(r.cost(u32::MAX), None);
        // Where `n * t` itself would overflow a u64, `checked_mul` refuses it too.
        let huge = Rate {
            t: u64::MAX / 2,
            tau: u64::MAX / 2,
        };
        assert_eq!(huge.cost(3), None);
        assert_eq!(huge.cost(1), Some(u64::MAX / 2));
        // The largest bucket: MAX_TOKENS tokens, all of them in one request.
        let big = Rate::new(MAX_TOKENS, MAX_PERIOD_NANOS);
        assert_eq!(big.cost(u32::MAX), Some(big.tau));
    }

    #[test]
    fn weighted_charge_and_refund_are_exact_for_both_buckets() {
        let l = Limits {
            burst: Rate::new(5, 500),        // t = 100
            sustained: Rate::new(8, 80_000), // t = 10_000
        };
        assert_eq!(l.cost(6), Err(BucketKind::Burst));
        assert_eq!(
            l.cost(9),
            Err(BucketKind::Burst),
            "both too small: the smaller bucket"
        );
        let cost = l.cost(5).unwrap();
        assert_eq!(
            cost,
            Cost {
                burst: 500,
                sustained: 50_000
            }
        );
        let full = Tats::full(1_000);
        let charged = l.charge(full, 1_000, cost).unwrap();
        assert_eq!(
            cost.refund(charged),
            full,
            "a refund undoes the charge exactly"
        );
        // Sustained has 3 tokens left, burst none: 3 more need the burst's 300 ns.
        assert_eq!(
            l.charge(charged, 1_000, l.cost(3).unwrap()),
            Err(Short {
                wait: 300,
                bucket: BucketKind::Burst
            })
        );
        // After 500 ns the burst is full again; sustained holds 3 tokens and 500 ns: 4 waits
        // the 9_500 ns its fourth token lacks.
        assert_eq!(
            l.charge(charged, 1_500, l.cost(4).unwrap()),
            Err(Short {
                wait: 9_500,
                bucket: BucketKind::Sustained
            })
        );
        assert!(l.charge(charged, 1_500, l.cost(3).unwrap()).is_ok());
    }

    /// The counter-example to carrying debt in time rather than in tokens: 100 admitted under 100/1s
    /// (t = 10 ms) owe 1 s, which under 100/10s (t = 100 ms) is the same 100 tokens, 10 s.
    #[test]
    fn convert_carries_tokens_rounded_up_and_capped() {
        let (a, b) = (
            Rate::new(100, 1_000_000_000),
            Rate::new(100, 10_000_000_000),
        );
        assert_eq!(a.convert(b, 1_000_000_000, 0), 10_000_000_000);
        assert_eq!(b.convert(a, 10_000_000_000, 0), 1_000_000_000);
        // As of the reload's instant: 500 ms after the admissions, half the debt is left.
        assert_eq!(a.convert(b, 1_000_000_000, 500_000_000), 5_500_000_000);
        // Full at `at`: kept as it is, whatever the rates.
        assert_eq!(a.convert(b, 400, 500), 400);
        // Rounded up, never down: 1 ns of t = 3 is a third of a token, 1 ns of t = 2.
        let (three, two) = (Rate::new(1, 3), Rate::new(1, 2));
        assert_eq!(three.convert(two, 101, 100), 101);
        assert_eq!(two.convert(three, 101, 100), 102);
        // A token a year owed by a bucket of u32::MAX tokens a second: capped.
        let (fast, slow) = (Rate::new(MAX_TOKENS, 1), Rate::new(1, MAX_PERIOD_NANOS));
        assert_eq!(fast.convert(slow, 1 << 40, 0), DEBT_CAP);
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
        assert_eq!(
            l.charge(empty, 0, l.unit()),
            short(1_000, BucketKind::Burst)
        );
        let l = Limits {
            burst: Rate::new(1, 100),
            sustained: Rate::new(1, 1_000),
        };
        let empty = Tats {
            burst: 100,
            sustained: 1_000,
        };
        assert_eq!(
            l.charge(empty, 0, l.unit()),
            short(1_000, BucketKind::Sustained)
        );
        let tie = Limits {
            burst: Rate::new(1, 100),
            sustained: Rate::new(1, 100),
        };
        let empty = Tats {
            burst: 100,
            sustained: 100,
        };
        assert_eq!(
            tie.charge(empty, 0, tie.unit()),
            short(100, BucketKind::Sustained)
        );
    }
}
