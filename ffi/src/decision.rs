//! The answer to one request, as C reads it: [`tg_decision`] and its enums.

use core::ffi::c_char;
use core::time::Duration;

use tollgate::{BucketKind, Cause, Decision};

/// The kind of a decision.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum tg_decision_kind {
    /// Admitted: serve the request.
    Admit = 0,
    /// The caller's own quota is used up: HTTP 429 with `Retry-After`.
    Throttle = 1,
    /// Shared capacity or the limiter's store refused: HTTP 503.
    Unavailable = 2,
    /// The request's cost (`tg_admit_n`) is more than the caller's bucket holds when full:
    /// HTTP 429 with no `Retry-After` (waiting never helps); nothing was charged. `bucket`
    /// names the bucket that is too small.
    Exceeds = 3,
}

/// For a throttle, which of the caller's buckets is empty; for `TG_DECISION_KIND_EXCEEDS`,
/// which is too small for the cost.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum tg_bucket_kind {
    /// Neither a throttle nor a cost that exceeds a bucket.
    None = 0,
    /// The short-period bucket that bounds bursts.
    Burst = 1,
    /// The long-period bucket that bounds sustained use.
    Sustained = 2,
}

/// For an unavailable decision, which shared resource refused (for operators; never tell the
/// caller, who only sees `code`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum tg_cause {
    /// Not an unavailable decision.
    None = 0,
    /// The caller's shard has used all its admission slots in this window.
    ShardFull = 1,
    /// The caller's tenant has used its share of the shard's slots in this window.
    TenantShare = 2,
    /// The identity table has no slot for a new identity.
    TableFull = 3,
    /// The shared store is unreachable, erroring or too slow.
    StoreUnavailable = 4,
}

/// `retry_after_ms` when there is no wait to tell (admitted, or no safe estimate).
pub const TG_RETRY_AFTER_NONE: u64 = u64::MAX;

/// The answer to one request.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct tg_decision {
    /// Admit, throttle (429), unavailable (503) or exceeds (429, no wait).
    pub kind: tg_decision_kind,
    /// 200 for admit (the handler picks the real status), 429 or 503.
    pub http_status: u16,
    /// For a throttle, the empty bucket; for exceeds, the bucket too small for the cost;
    /// `TG_BUCKET_KIND_NONE` otherwise.
    pub bucket: tg_bucket_kind,
    /// For an unavailable decision, the resource that refused; `TG_CAUSE_NONE` otherwise.
    pub cause: tg_cause,
    /// The wait before the same request would be admitted, in milliseconds rounded up;
    /// `TG_RETRY_AFTER_NONE` (`UINT64_MAX`) when there is none. HTTP's `Retry-After` is this in
    /// whole seconds, rounded up.
    pub retry_after_ms: u64,
    /// The profile's catalog code for a refusal (`"rate_limited"`, ...), `""` for admit; never
    /// NULL. NUL-terminated, owned by the limiter, valid until `tg_limiter_free`.
    pub code: *const c_char,
}

impl tg_decision {
    /// The C form of [`Decision::Admit`]: one constant, for the answer most calls give.
    pub(crate) const ADMITTED: tg_decision = tg_decision {
        kind: tg_decision_kind::Admit,
        http_status: 200,
        bucket: tg_bucket_kind::None,
        cause: tg_cause::None,
        retry_after_ms: TG_RETRY_AFTER_NONE,
        code: c"".as_ptr(),
    };

    /// The C form of `d`, whose catalog code (`""` for an admit) is `code`.
    #[inline]
    pub(crate) fn new(d: Decision, code: *const c_char) -> tg_decision {
        // The engine's one mapping of a decision to its kind, bucket, cause and status.
        let outcome = d.outcome();
        let kind = match (outcome.bucket(), outcome.cause()) {
            (Some(_), _) if matches!(d, Decision::Exceeds { .. }) => tg_decision_kind::Exceeds,
            (Some(_), _) => tg_decision_kind::Throttle,
            (None, Some(_)) => tg_decision_kind::Unavailable,
            (None, None) => tg_decision_kind::Admit,
        };
        tg_decision {
            kind,
            http_status: outcome.http_status(),
            bucket: outcome.bucket().map_or(tg_bucket_kind::None, Into::into),
            cause: outcome.cause().map_or(tg_cause::None, Into::into),
            retry_after_ms: d.retry_after().map_or(TG_RETRY_AFTER_NONE, millis_up),
            code,
        }
    }
}

impl From<BucketKind> for tg_bucket_kind {
    #[inline]
    fn from(bucket: BucketKind) -> Self {
        match bucket {
            BucketKind::Burst => tg_bucket_kind::Burst,
            BucketKind::Sustained => tg_bucket_kind::Sustained,
        }
    }
}

impl From<Cause> for tg_cause {
    #[inline]
    fn from(cause: Cause) -> Self {
        match cause {
            Cause::ShardFull => tg_cause::ShardFull,
            Cause::TenantShare => tg_cause::TenantShare,
            Cause::TableFull => tg_cause::TableFull,
            Cause::StoreUnavailable => tg_cause::StoreUnavailable,
        }
    }
}

/// Milliseconds, rounded up; never `TG_RETRY_AFTER_NONE` (which means "no wait").
#[inline]
pub(crate) fn millis_up(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms)
        .unwrap_or(u64::MAX)
        .min(TG_RETRY_AFTER_NONE - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::ffi::CStr;

    #[test]
    fn the_admitted_constant_is_what_an_admit_converts_to() {
        let made = tg_decision::new(Decision::Admit, c"".as_ptr());
        let constant = tg_decision::ADMITTED;
        // SAFETY: both codes point to NUL-terminated literals.
        let codes = unsafe { (CStr::from_ptr(made.code), CStr::from_ptr(constant.code)) };
        assert_eq!(codes.0, codes.1);
        assert_eq!(
            tg_decision {
                code: made.code,
                ..constant
            },
            made,
            "every field but the code's address"
        );
    }
}
