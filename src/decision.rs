//! What `admit` answers, and how that maps onto HTTP: [`Decision`] with its wait, and
//! [`Outcome`], the one enumeration of its kinds that metrics, the Redis script, HTTP and the
//! C ABI map from.

use core::time::Duration;

pub(crate) use crate::profile::CatalogEntry;
use crate::profile::Profile;

/// The answer to one request.
///
/// `Throttle` is this caller's own quota (HTTP 429); `Unavailable` is shared capacity or the
/// limiter's store (HTTP 503). The two are kept apart so that clients can tell "slow down" from
/// "the provider is full", and so that a 503 never carries anything computed from a neighbour.
/// `Exceeds` is a weighted request ([`Limiter::admit_n`](crate::Limiter::admit_n)) that costs
/// more than the caller's bucket can ever hold: no wait would help.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Admitted: one token was taken from each of the caller's buckets.
    Admit,
    /// The caller's own bucket is empty (429).
    Throttle {
        /// The earliest time after which this same request would be admitted, to the nanosecond.
        retry_after: Duration,
        /// The bucket that is short longest.
        bucket: BucketKind,
    },
    /// The request's cost (`n` of [`Limiter::admit_n`](crate::Limiter::admit_n)) is more than
    /// this bucket of the caller's route class holds when full (429, no `Retry-After`).
    ///
    /// Neither a `Throttle` (waiting never helps, so any wait would be made up) nor
    /// `Unavailable` (it is about the caller's own, public, class limits, not shared capacity
    /// or the store). Nothing was charged. Where both buckets are too small, the smaller one
    /// (in tokens) is named: it bounds the largest cost this class can admit.
    Exceeds {
        /// The bucket that can never hold the cost.
        bucket: BucketKind,
    },
    /// Capacity or store refused (503).
    Unavailable {
        /// When the refusal ends, if that can be said without revealing anything about another
        /// caller (the next capacity window); `None` otherwise.
        retry_after: Option<Duration>,
        /// Which shared resource refused, for operators; callers only see the catalog code.
        cause: Cause,
    },
}

/// Which of an identity's two buckets is empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BucketKind {
    /// The short-period bucket that bounds bursts.
    Burst,
    /// The long-period bucket that bounds sustained use.
    Sustained,
}

/// Why a request was refused for capacity rather than for the caller's own quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The caller's shard has used all its admission slots in this window.
    ShardFull,
    /// The caller's tenant has used its share of the shard's slots in this window.
    TenantShare,
    /// The identity table has no slot for a new identity (fail closed, never unlimited).
    TableFull,
    /// The shared store (Redis) is unreachable, erroring or too slow.
    StoreUnavailable,
}

impl Decision {
    /// True for [`Decision::Admit`].
    #[inline]
    pub fn is_admit(&self) -> bool {
        matches!(self, Decision::Admit)
    }

    /// The HTTP status: 200 for admit (the handler decides the real one), 429 or 503.
    #[inline]
    pub fn http_status(&self) -> u16 {
        self.outcome().http_status()
    }

    /// Which of the nine outcomes this is: the decision without its wait.
    #[inline]
    pub fn outcome(&self) -> Outcome {
        match *self {
            Decision::Admit => Outcome::Admitted,
            Decision::Throttle { bucket, .. } => match bucket {
                BucketKind::Burst => Outcome::ThrottledBurst,
                BucketKind::Sustained => Outcome::ThrottledSustained,
            },
            Decision::Exceeds { bucket } => match bucket {
                BucketKind::Burst => Outcome::ExceedsBurst,
                BucketKind::Sustained => Outcome::ExceedsSustained,
            },
            Decision::Unavailable { cause, .. } => match cause {
                Cause::TenantShare => Outcome::TenantShare,
                Cause::ShardFull => Outcome::ShardFull,
                Cause::TableFull => Outcome::TableFull,
                Cause::StoreUnavailable => Outcome::StoreUnavailable,
            },
        }
    }

    /// The wait this decision carries, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match *self {
            Decision::Admit | Decision::Exceeds { .. } => None,
            Decision::Throttle { retry_after, .. } => Some(retry_after),
            Decision::Unavailable { retry_after, .. } => retry_after,
        }
    }

    /// The catalog entry for a refusal; `None` for [`Decision::Admit`].
    pub fn catalog_entry(&self) -> Option<CatalogEntry> {
        self.outcome().catalog_entry()
    }

    /// The stable code callers see (`rate_limited`, `over_capacity`, `limiter_unavailable` in the
    /// example profile, `cost_exceeds_limit` by default); `None` for [`Decision::Admit`].
    pub fn catalog_code<'p>(&self, profile: &'p Profile) -> Option<&'p str> {
        self.catalog_entry()
            .map(|e| profile.catalog.entry(e).code.as_str())
    }

    /// `Retry-After` as HTTP sends it: whole seconds rounded up, at least 1, capped at `max`.
    /// `None` where no wait can be computed for this caller: the header is then omitted.
    pub fn retry_after_secs(&self, max: Duration) -> Option<u64> {
        let wait = self.retry_after()?;
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        Some(secs.clamp(1, max.as_secs().max(1)))
    }
}

/// A [`Decision`] without its wait: the one place that enumerates every kind of answer, with
/// what each is called in metrics, its number and its HTTP status.
///
/// Everything that turns decisions into something else (metric labels, the Redis script's
/// reply, the C ABI, HTTP responses) goes through this type, so that a new kind of answer is
/// added here once and nowhere is one forgotten.
///
/// | outcome | [`index`](Outcome::index) | [`label`](Outcome::label) | [`cause_label`](Outcome::cause_label) | [`http_status`](Outcome::http_status) |
/// | --- | --- | --- | --- | --- |
/// | `Admitted` | 0 | `admitted` | `none` | 200 |
/// | `ThrottledBurst` | 1 | `throttled` | `burst` | 429 |
/// | `ThrottledSustained` | 2 | `throttled` | `sustained` | 429 |
/// | `TenantShare` | 3 | `unavailable` | `tenant_share` | 503 |
/// | `ShardFull` | 4 | `unavailable` | `shard_full` | 503 |
/// | `TableFull` | 5 | `unavailable` | `table_full` | 503 |
/// | `StoreUnavailable` | 6 | `unavailable` | `store_unavailable` | 503 |
/// | `ExceedsBurst` | 7 | `exceeds` | `burst` | 429 |
/// | `ExceedsSustained` | 8 | `exceeds` | `sustained` | 429 |
///
/// ```
/// use tollgate::{Cause, Decision, Outcome};
///
/// let d = Decision::Unavailable { retry_after: None, cause: Cause::TableFull };
/// assert_eq!(d.outcome(), Outcome::TableFull);
/// assert_eq!((d.outcome().label(), d.outcome().http_status()), ("unavailable", 503));
/// assert_eq!(Outcome::from_index(d.outcome().index()), Some(Outcome::TableFull));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Outcome {
    /// [`Decision::Admit`].
    Admitted = 0,
    /// [`Decision::Throttle`] by the burst bucket.
    ThrottledBurst = 1,
    /// [`Decision::Throttle`] by the sustained bucket.
    ThrottledSustained = 2,
    /// [`Decision::Unavailable`] for [`Cause::TenantShare`].
    TenantShare = 3,
    /// [`Decision::Unavailable`] for [`Cause::ShardFull`].
    ShardFull = 4,
    /// [`Decision::Unavailable`] for [`Cause::TableFull`].
    TableFull = 5,
    /// [`Decision::Unavailable`] for [`Cause::StoreUnavailable`].
    StoreUnavailable = 6,
    /// [`Decision::Exceeds`] the burst bucket.
    ExceedsBurst = 7,
    /// [`Decision::Exceeds`] the sustained bucket.
    ExceedsSustained = 8,
}

impl Outcome {
    /// How many outcomes there are: arrays indexed by [`Outcome::index`] have this length.
    pub const COUNT: usize = 9;

    /// Every outcome, in index order.
    pub const ALL: [Outcome; Outcome::COUNT] = [
        Outcome::Admitted,
        Outcome::ThrottledBurst,
        Outcome::ThrottledSustained,
        Outcome::TenantShare,
        Outcome::ShardFull,
        Outcome::TableFull,
        Outcome::StoreUnavailable,
        Outcome::ExceedsBurst,
        Outcome::ExceedsSustained,
    ];

    /// Its number, `0..COUNT`, stable within a version of tollgate (the Redis script answers
    /// with it). Not an ABI: the C ABI has its own, never renumbered, codes.
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The outcome numbered `index`, if there is one.
    #[inline]
    pub const fn from_index(index: usize) -> Option<Outcome> {
        if index < Outcome::COUNT {
            Some(Outcome::ALL[index])
        } else {
            None
        }
    }

    /// The `outcome` metric label: `admitted`, `throttled`, `exceeds` or `unavailable`.
    pub const fn label(self) -> &'static str {
        match self {
            Outcome::Admitted => "admitted",
            Outcome::ThrottledBurst | Outcome::ThrottledSustained => "throttled",
            Outcome::ExceedsBurst | Outcome::ExceedsSustained => "exceeds",
            _ => "unavailable",
        }
    }

    /// The `cause` metric label: which bucket or shared resource refused (`none` for admit).
    pub const fn cause_label(self) -> &'static str {
        match self {
            Outcome::Admitted => "none",
            Outcome::ThrottledBurst | Outcome::ExceedsBurst => "burst",
            Outcome::ThrottledSustained | Outcome::ExceedsSustained => "sustained",
            Outcome::TenantShare => "tenant_share",
            Outcome::ShardFull => "shard_full",
            Outcome::TableFull => "table_full",
            Outcome::StoreUnavailable => "store_unavailable",
        }
    }

    /// The bucket that is short, for a throttle, or too small, for a cost that exceeds it.
    pub const fn bucket(self) -> Option<BucketKind> {
        match self {
            Outcome::ThrottledBurst | Outcome::ExceedsBurst => Some(BucketKind::Burst),
            Outcome::ThrottledSustained | Outcome::ExceedsSustained => Some(BucketKind::Sustained),
            _ => None,
        }
    }

    /// The shared resource that refused, for a 503.
    pub const fn cause(self) -> Option<Cause> {
        match self {
            Outcome::TenantShare => Some(Cause::TenantShare),
            Outcome::ShardFull => Some(Cause::ShardFull),
            Outcome::TableFull => Some(Cause::TableFull),
            Outcome::StoreUnavailable => Some(Cause::StoreUnavailable),
            _ => None,
        }
    }

    /// The catalog entry callers see for a refusal; `None` for admit.
    pub const fn catalog_entry(self) -> Option<CatalogEntry> {
        match self {
            Outcome::Admitted => None,
            Outcome::ThrottledBurst | Outcome::ThrottledSustained => Some(CatalogEntry::Throttled),
            Outcome::ExceedsBurst | Outcome::ExceedsSustained => Some(CatalogEntry::CostExceeds),
            Outcome::StoreUnavailable => Some(CatalogEntry::LimiterUnavailable),
            _ => Some(CatalogEntry::OverCapacity),
        }
    }

    /// The HTTP status: 200 for admit (the handler decides the real one), 429 for the caller's
    /// own quota (a throttle, or a cost larger than the caller's bucket), 503 for shared
    /// capacity and the store.
    #[inline]
    pub const fn http_status(self) -> u16 {
        match self {
            Outcome::Admitted => 200,
            Outcome::ThrottledBurst
            | Outcome::ThrottledSustained
            | Outcome::ExceedsBurst
            | Outcome::ExceedsSustained => 429,
            _ => 503,
        }
    }

    /// The decision with this outcome and wait. A throttle's wait is its Retry-After (zero if
    /// `None`); a capacity or store refusal keeps `wait` as it is; a cost that exceeds a bucket
    /// has none.
    pub fn decision(self, wait: Option<Duration>) -> Decision {
        match (self.bucket(), self.cause()) {
            (Some(bucket), _)
                if matches!(self, Outcome::ExceedsBurst | Outcome::ExceedsSustained) =>
            {
                Decision::Exceeds { bucket }
            }
            (Some(bucket), _) => Decision::Throttle {
                retry_after: wait.unwrap_or_default(),
                bucket,
            },
            (None, Some(cause)) => Decision::Unavailable {
                retry_after: wait,
                cause,
            },
            (None, None) => Decision::Admit,
        }
    }
}

/// One caller's tokens left, per bucket: what a backend can tell the caller about its own
/// quota (the `RateLimit` header, where the profile opts in), never anyone else's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remaining {
    /// Whole tokens in the burst bucket.
    pub burst: u64,
    /// Whole tokens in the sustained bucket.
    pub sustained: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_and_caps() {
        let t = |ns| Decision::Throttle {
            retry_after: Duration::from_nanos(ns),
            bucket: BucketKind::Burst,
        };
        let max = Duration::from_secs(3600);
        assert_eq!(t(1).retry_after_secs(max), Some(1));
        assert_eq!(t(0).retry_after_secs(max), Some(1));
        assert_eq!(t(1_000_000_000).retry_after_secs(max), Some(1));
        assert_eq!(t(1_000_000_001).retry_after_secs(max), Some(2));
        assert_eq!(t(86_400_000_000_000).retry_after_secs(max), Some(3600));
        let store = Decision::Unavailable {
            retry_after: None,
            cause: Cause::StoreUnavailable,
        };
        assert_eq!(store.retry_after_secs(max), None);
        assert_eq!(store.http_status(), 503);
        assert_eq!(
            store.catalog_entry(),
            Some(CatalogEntry::LimiterUnavailable)
        );
        assert_eq!(Decision::Admit.catalog_entry(), None);
    }

    #[test]
    fn outcomes_round_trip() {
        for (i, o) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(o.index(), i);
            assert_eq!(Outcome::from_index(i), Some(o));
            let d = o.decision(Some(Duration::from_secs(1)));
            assert_eq!(d.outcome(), o);
            assert_eq!(d.http_status(), o.http_status());
            assert_eq!(d.catalog_entry(), o.catalog_entry());
            assert_eq!(o.bucket().is_some(), o.http_status() == 429);
            assert_eq!(o.cause().is_some(), o.http_status() == 503);
            assert_eq!(
                matches!(d, Decision::Exceeds { .. }),
                d.retry_after().is_none() && o.http_status() == 429
            );
        }
        let too_big = Decision::Exceeds {
            bucket: BucketKind::Sustained,
        };
        assert_eq!(too_big.retry_after_secs(Duration::from_secs(60)), None);
        assert_eq!(too_big.catalog_entry(), Some(CatalogEntry::CostExceeds));
        assert_eq!(too_big.outcome().label(), "exceeds");
        assert_eq!(Outcome::from_index(Outcome::COUNT), None);
    }
}
