//! What `admit` answers, and how that maps onto HTTP.

use core::time::Duration;

pub use crate::profile::CatalogEntry;
use crate::profile::Profile;

/// The answer to one request.
///
/// `Throttle` is this caller's own quota (HTTP 429); `Unavailable` is shared capacity or the
/// limiter's store (HTTP 503). The two are kept apart so that clients can tell "slow down" from
/// "the provider is full", and so that a 503 never carries anything computed from a neighbour.
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
    pub fn http_status(&self) -> u16 {
        match self {
            Decision::Admit => 200,
            Decision::Throttle { .. } => 429,
            Decision::Unavailable { .. } => 503,
        }
    }

    /// The wait this decision carries, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match *self {
            Decision::Admit => None,
            Decision::Throttle { retry_after, .. } => Some(retry_after),
            Decision::Unavailable { retry_after, .. } => retry_after,
        }
    }

    /// The catalog entry for a refusal; `None` for [`Decision::Admit`].
    pub fn catalog_entry(&self) -> Option<CatalogEntry> {
        match self {
            Decision::Admit => None,
            Decision::Throttle { .. } => Some(CatalogEntry::Throttled),
            Decision::Unavailable {
                cause: Cause::StoreUnavailable,
                ..
            } => Some(CatalogEntry::LimiterUnavailable),
            Decision::Unavailable { .. } => Some(CatalogEntry::OverCapacity),
        }
    }

    /// The stable code callers see (`rate_limited`, `over_capacity`, `limiter_unavailable` in the
    /// example profile); `None` for [`Decision::Admit`].
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
}
