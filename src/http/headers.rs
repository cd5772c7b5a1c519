//! The rate-limit header names and the values computed from the profile.
//!
//! The syntax follows the newest IETF httpapi draft, `draft-ietf-httpapi-ratelimit-headers-11`:
//! `RateLimit-Policy` is a structured-field List of String items with `q` (quota) and `w`
//! (window, whole seconds) parameters, one item for the burst bucket and one for the sustained
//! bucket; `RateLimit` carries `r` (remaining) and `t` (seconds until the quota is restored) per
//! policy. A token bucket refills continuously, so `t` is the time until the caller's own bucket
//! is full again, rounded up: waiting that long never finds less than the whole quota.

use core::time::Duration;

use ::http::header::{HeaderName, HeaderValue};

use crate::decision::BucketKind;
use crate::decision::Remaining;
use crate::profile::{BucketLimit, RouteClassLimits};

/// `X-Request-Id`: taken from the request when well-formed, echoed in the response and body.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// `RateLimit-Policy` (ratelimit-headers draft 11): the caller's own quota policies.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (ratelimit-headers draft 11): the caller's own remaining quota, when opted in.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// `X-RateLimit-Limit` (legacy, opt-in): the tightest bucket's quota.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining` (legacy, opt-in): the tightest bucket's remaining tokens.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset` (legacy, opt-in): seconds until the tightest bucket is full again.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The burst bucket's policy name in `RateLimit-Policy` and `RateLimit`.
pub const BURST_POLICY: &str = "burst";
/// The sustained bucket's policy name in `RateLimit-Policy` and `RateLimit`.
pub const SUSTAINED_POLICY: &str = "sustained";

/// The policy name of `bucket`, as the headers and the problem body's `violated-policies` say it.
pub(crate) fn bucket_policy(bucket: BucketKind) -> &'static str {
    match bucket {
        BucketKind::Burst => BURST_POLICY,
        BucketKind::Sustained => SUSTAINED_POLICY,
    }
}

/// Whole seconds for the draft's `w` parameter, rounded up (at least 1): a sub-second or
/// fractional period is published as a longer window with the same quota, which never tells a
/// caller it may send more than it may.
fn window_secs(per: Duration) -> u64 {
    (per.as_secs() + u64::from(per.subsec_nanos() > 0)).max(1)
}

fn policy_item(out: &mut String, name: &str, b: &BucketLimit) {
    use core::fmt::Write as _;
    let _ = write!(
        out,
        "\"{name}\";q={};w={}",
        b.tokens.get(),
        window_secs(b.per.get())
    );
}

/// `RateLimit-Policy` for one route class: `"burst";q=50;w=1, "sustained";q=6000;w=3600`.
///
/// Computed once per route class and profile, not per request (see [`RouteTable`](super::RouteTable)).
pub fn policy_header(limits: &RouteClassLimits) -> HeaderValue {
    let mut s = String::with_capacity(64);
    policy_item(&mut s, BURST_POLICY, &limits.burst);
    s.push_str(", ");
    policy_item(&mut s, SUSTAINED_POLICY, &limits.sustained);
    HeaderValue::from_str(&s).expect("names and integers are a valid header value")
}

/// A route class's `RateLimit-Policy` value with the two buckets it was written from, interned
/// for the life of the process (one copy per distinct pair of buckets ever compiled, some 150
/// bytes each; a reload to the same numbers adds nothing): the clone each admitted response
/// gets copies a pointer instead of counting a reference on a line every core writes, and a
/// response future carries one pointer for both the header and the limits its `RateLimit`
/// value is computed from.
#[derive(Debug)]
pub(crate) struct Policy {
    /// `RateLimit-Policy`, from [`policy_header`].
    pub(crate) header: HeaderValue,
    /// The buckets (the class's `mode` is not kept: neither header depends on it).
    pub(crate) limits: RouteClassLimits,
}

/// The interned [`Policy`] of `limits`.
pub(crate) fn interned_policy(limits: &RouteClassLimits) -> &'static Policy {
    static INTERNED: parking_lot::Mutex<Vec<&'static Policy>> = parking_lot::Mutex::new(Vec::new());
    let mut interned = INTERNED.lock();
    let same =
        |p: &&&Policy| p.limits.burst == limits.burst && p.limits.sustained == limits.sustained;
    match interned.iter().find(same) {
        Some(p) => p,
        None => {
            let value = policy_header(limits);
            let text: &'static str =
                Box::leak(value.to_str().expect("policy_header writes ASCII").into());
            let p: &'static Policy = Box::leak(Box::new(Policy {
                header: HeaderValue::from_static(text),
                limits: RouteClassLimits {
                    mode: None,
                    lease: None,
                    ..*limits
                },
            }));
            interned.push(p);
            p
        }
    }
}

/// Whole seconds until a bucket holding `remaining` whole tokens is full again, rounded up.
///
/// Computed from whole tokens, so it may exceed the true wait by less than one token's refill:
/// it errs towards telling the caller to wait longer, never shorter.
fn restore_secs(remaining: u64, b: &BucketLimit) -> u64 {
    let q = u128::from(b.tokens.get());
    let missing = q.saturating_sub(u128::from(remaining));
    let nanos = missing * b.per.get().as_nanos();
    u64::try_from(nanos.div_ceil(q * 1_000_000_000)).unwrap_or(u64::MAX)
}

/// The caller's own remaining tokens with each bucket's `t`, computed before the response is
/// written: two integers more than [`Remaining`], so that an admitted request carries no copy of
/// its class's limits to the header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Quota {
    remaining: Remaining,
    burst_t: u64,
    sustained_t: u64,
    // The legacy headers' limits: only the tower layer writes those.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    burst_q: u64,
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    sustained_q: u64,
}

impl Quota {
    pub(crate) fn new(remaining: Remaining, limits: &RouteClassLimits) -> Self {
        Quota {
            remaining,
            burst_t: restore_secs(remaining.burst, &limits.burst),
            sustained_t: restore_secs(remaining.sustained, &limits.sustained),
            burst_q: limits.burst.tokens.get(),
            sustained_q: limits.sustained.tokens.get(),
        }
    }

    pub(crate) fn header(&self) -> HeaderValue {
        let s = format!(
            "\"{BURST_POLICY}\";r={};t={}, \"{SUSTAINED_POLICY}\";r={};t={}",
            self.remaining.burst, self.burst_t, self.remaining.sustained, self.sustained_t,
        );
        HeaderValue::from_str(&s).expect("names and integers are a valid header value")
    }

    /// Writes `X-RateLimit-Limit`, `-Remaining` and `-Reset` (seconds) for the caller's tightest
    /// bucket: the one with fewer tokens left, which refuses first (the burst one on a tie).
    #[cfg(feature = "tower")]
    pub(crate) fn write_legacy(&self, headers: &mut ::http::HeaderMap) {
        let (q, r, t) = if self.remaining.sustained < self.remaining.burst {
            (self.sustained_q, self.remaining.sustained, self.sustained_t)
        } else {
            (self.burst_q, self.remaining.burst, self.burst_t)
        };
        headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(q));
        headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(r));
        headers.insert(X_RATELIMIT_RESET, HeaderValue::from(t));
    }
}

/// `RateLimit` for the caller's own buckets: `"burst";r=49;t=1, "sustained";r=5999;t=1`, where
/// `limits` are the caller's route class's (`t` is computed from them and the caller's own
/// tokens only).
pub fn remaining_header(remaining: Remaining, limits: &RouteClassLimits) -> HeaderValue {
    Quota::new(remaining, limits).header()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Mode;

    fn limits(burst: u64, sustained: u64) -> RouteClassLimits {
        let yaml = format!(
            "name: t\nidentities: {{ capacity: 8 }}\nroute_classes:\n  c:\n    \
             burst: {{ tokens: {burst}, per: 1s }}\n    sustained: {{ tokens: {sustained}, per: 1h }}\n"
        );
        *crate::Profile::from_yaml(&yaml)
            .unwrap()
            .route_class("c")
            .unwrap()
    }

    #[test]
    fn one_interned_policy_per_pair_of_buckets() {
        let a = interned_policy(&limits(7, 700));
        assert_eq!(a.header, policy_header(&limits(7, 700)));
        assert_eq!(a.header, "\"burst\";q=7;w=1, \"sustained\";q=700;w=3600");
        assert_eq!(
            (a.limits.burst, a.limits.sustained),
            (limits(7, 700).burst, limits(7, 700).sustained)
        );
        // The same buckets, whatever the mode: the same copy (the headers do not depend on it).
        let shadow = RouteClassLimits {
            mode: Some(Mode::Shadow),
            lease: None,
            ..limits(7, 700)
        };
        assert!(core::ptr::eq(a, interned_policy(&shadow)));
        assert!(core::ptr::eq(a, interned_policy(&limits(7, 700))));
        let b = interned_policy(&limits(7, 701));
        assert!(!core::ptr::eq(a, b));
        assert_eq!(b.header, "\"burst\";q=7;w=1, \"sustained\";q=701;w=3600");
    }
}
