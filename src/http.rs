//! Turning a [`Decision`] into an HTTP response, in one place that every server integration uses.
//!
//! [`Answer`] holds what a response needs to say about rate limiting (the decision, the profile,
//! the request id, the caller's own policy and, where the profile opts in, the caller's own
//! remaining tokens) and writes it:
//!
//! | decision | status | headers | body |
//! | --- | --- | --- | --- |
//! | `Admit` | the handler's | `RateLimit-Policy`, `RateLimit` (opt-in), `X-Request-Id` | the handler's |
//! | `Throttle` | 429 | the above, `Retry-After`, `Cache-Control: no-store` | [`Problem`] |
//! | `Unavailable` | 503 | the above, `Retry-After` only where computable, `Cache-Control: no-store` | [`Problem`] |
//!
//! The header syntax follows the newest IETF httpapi draft,
//! `draft-ietf-httpapi-ratelimit-headers-11`: `RateLimit-Policy` is a structured-field List of
//! String items with `q` (quota) and `w` (window, whole seconds) parameters, one item for the
//! burst bucket and one for the sustained bucket; `RateLimit` carries `r` (remaining) per policy.
//! The `t` parameter is left out: a token bucket refills continuously, so there is no window
//! within which the caller can use no more than `r`, and the draft makes `t` optional.
//!
//! Nothing written here is computed from another caller: the wait is the caller's own bucket or
//! the capacity window (the same for everyone), the remaining tokens are the caller's own, and
//! the detail texts are fixed sentences.
//!
//! ```
//! use tollgate::http::{Answer, RequestId};
//! use tollgate::{BucketKind, Decision, Profile};
//! use std::time::Duration;
//!
//! let profile = Profile::from_path("examples/profiles/example.yaml")?;
//! let id = RequestId::parse("req-1").unwrap();
//! let decision = Decision::Throttle {
//!     retry_after: Duration::from_millis(1500),
//!     bucket: BucketKind::Burst,
//! };
//! let response: http::Response<Vec<u8>> = Answer::new(decision, &profile, &id)
//!     .refusal()
//!     .expect("a throttle is a refusal");
//! assert_eq!(response.status(), 429);
//! assert_eq!(response.headers()["retry-after"], "2");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use core::fmt;
use core::time::Duration;

use ::http::header::{
    HeaderMap, HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER,
};
use ::http::{Response, StatusCode};
use serde::Serialize;

use crate::decision::{BucketKind, CatalogEntry, Cause, Decision};
use crate::limiter::Remaining;
use crate::profile::{BucketLimit, Profile, RouteClassLimits};

/// `X-Request-Id`: taken from the request when well-formed, echoed in the response and body.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// `RateLimit-Policy` (ratelimit-headers draft 11): the caller's own quota policies.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (ratelimit-headers draft 11): the caller's own remaining quota, when opted in.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// The RFC 9457 media type of refusal bodies.
pub const PROBLEM_JSON: &str = "application/problem+json";
/// The longest request id taken from a caller.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// The burst bucket's policy name in `RateLimit-Policy` and `RateLimit`.
pub const BURST_POLICY: &str = "burst";
/// The sustained bucket's policy name in `RateLimit-Policy` and `RateLimit`.
pub const SUSTAINED_POLICY: &str = "sustained";

/// A request id: 1 to [`MAX_REQUEST_ID_LEN`] characters of `A-Z a-z 0-9 . _ -`.
///
/// The caller's own `X-Request-Id` is kept when it has that form, so that its logs and ours
/// agree; anything else (empty, too long, other characters, several values) is replaced by a
/// generated id, so that nothing a caller sends is reflected into headers or bodies unchecked.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(HeaderValue);

impl RequestId {
    /// The id if `s` is well-formed.
    pub fn parse(s: &str) -> Option<RequestId> {
        let ok = (1..=MAX_REQUEST_ID_LEN).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            HeaderValue::from_str(s).ok().map(RequestId)
        } else {
            None
        }
    }

    /// A fresh random id: 32 lower-case hex digits (128 bits), unique enough to find one request.
    pub fn generate() -> RequestId {
        let text = format!("{:032x}", fastrand::u128(..));
        RequestId(HeaderValue::try_from(text).expect("hex digits are a valid header value"))
    }

    /// The request's own `X-Request-Id` if it sent exactly one well-formed value, else a fresh one.
    pub fn from_headers(headers: &HeaderMap) -> RequestId {
        let mut values = headers.get_all(X_REQUEST_ID).iter();
        match (values.next(), values.next()) {
            (Some(v), None) => v.to_str().ok().and_then(RequestId::parse),
            _ => None,
        }
        .unwrap_or_else(RequestId::generate)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        // Only ever built from checked ASCII or hex digits.
        self.0.to_str().unwrap_or_default()
    }

    /// The id as a header value, ready to insert.
    pub fn header_value(&self) -> &HeaderValue {
        &self.0
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RequestId").field(&self.as_str()).finish()
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
/// Computed once per route class and profile, not per request (see `tower::RouteTable`).
pub fn policy_header(limits: &RouteClassLimits) -> HeaderValue {
    let mut s = String::with_capacity(64);
    policy_item(&mut s, BURST_POLICY, &limits.burst);
    s.push_str(", ");
    policy_item(&mut s, SUSTAINED_POLICY, &limits.sustained);
    HeaderValue::from_str(&s).expect("names and integers are a valid header value")
}

/// `RateLimit` for the caller's own buckets: `"burst";r=49, "sustained";r=5999`.
pub fn remaining_header(remaining: Remaining) -> HeaderValue {
    let s = format!(
        "\"{BURST_POLICY}\";r={}, \"{SUSTAINED_POLICY}\";r={}",
        remaining.burst, remaining.sustained
    );
    HeaderValue::from_str(&s).expect("names and integers are a valid header value")
}

/// An RFC 9457 problem body for a refusal, with the tollgate extension members `code`,
/// `request_id` and `retry_after`. Serialize it with `serde_json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem<'a> {
    /// The catalog entry's problem type URI.
    #[serde(rename = "type")]
    pub type_uri: &'a str,
    /// A short, fixed summary of the problem type.
    pub title: &'static str,
    /// The HTTP status, repeated as RFC 9457 recommends.
    pub status: u16,
    /// A fixed sentence about this occurrence; it names nothing but the caller's own situation.
    pub detail: String,
    /// The catalog's stable, machine-readable code.
    pub code: &'a str,
    /// The request id, also sent as `X-Request-Id`.
    pub request_id: &'a str,
    /// Seconds to wait, exactly as in `Retry-After`; absent when that header is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// The caller's own policy that is exhausted (the draft's `quota-exceeded` member), 429 only.
    #[serde(rename = "violated-policies", skip_serializing_if = "Option::is_none")]
    pub violated_policies: Option<[&'static str; 1]>,
}

/// What a response says about one request's rate limiting; see the [module docs](self).
#[derive(Clone, Copy, Debug)]
pub struct Answer<'a> {
    decision: Decision,
    profile: &'a Profile,
    request_id: &'a RequestId,
    policy: Option<&'a HeaderValue>,
    remaining: Option<Remaining>,
}

impl<'a> Answer<'a> {
    /// The answer for `decision` under `profile`, for the request `request_id`.
    pub fn new(decision: Decision, profile: &'a Profile, request_id: &'a RequestId) -> Self {
        Answer {
            decision,
            profile,
            request_id,
            policy: None,
            remaining: None,
        }
    }

    /// Adds `RateLimit-Policy` (from [`policy_header`] of the caller's route class).
    pub fn with_policy(mut self, policy: &'a HeaderValue) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Adds the caller's own remaining tokens (from `Limiter::remaining` of the caller's key).
    /// Sent only when the profile's `expose_remaining` is true.
    pub fn with_remaining(mut self, remaining: Option<Remaining>) -> Self {
        self.remaining = remaining;
        self
    }

    /// The decision this answer is for.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// `Retry-After` in seconds: rounded up, at least 1, capped at `retry_after.max`; `None`
    /// where the header is omitted.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.decision
            .retry_after_secs(self.profile.retry_after.max.get())
    }

    /// Writes the rate-limit headers into `headers` (replacing any of the same name):
    /// `X-Request-Id`, `RateLimit-Policy`, `RateLimit` when opted in, and for a refusal
    /// `Retry-After` (where computable) and `Cache-Control: no-store`.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        headers.insert(X_REQUEST_ID, self.request_id.0.clone());
        if let Some(policy) = self.policy {
            headers.insert(RATELIMIT_POLICY, policy.clone());
        }
        if self.profile.expose_remaining {
            if let Some(r) = self.remaining {
                headers.insert(RATELIMIT, remaining_header(r));
            }
        }
        if !self.decision.is_admit() {
            // A refusal is about this moment: no cache may replay it to the caller later.
            headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            if let Some(secs) = self.retry_after_secs() {
                headers.insert(RETRY_AFTER, HeaderValue::from(secs));
            }
        }
    }

    /// The problem body of a refusal; `None` for [`Decision::Admit`].
    pub fn problem(&self) -> Option<Problem<'a>> {
        let entry = self.decision.catalog_entry()?;
        let catalog = self.profile.catalog.entry(entry);
        let retry_after = self.retry_after_secs();
        let (title, status) = match entry {
            CatalogEntry::Throttled => ("Too Many Requests", 429),
            CatalogEntry::OverCapacity | CatalogEntry::LimiterUnavailable => {
                ("Service Unavailable", 503)
            }
        };
        let later = match retry_after {
            Some(1) => "retry after 1 second".to_owned(),
            Some(s) => format!("retry after {s} seconds"),
            None => "retry later".to_owned(),
        };
        let (detail, violated) = match self.decision {
            Decision::Throttle { bucket, .. } => {
                let name = bucket_policy(bucket);
                (
                    format!("You have used your {name} quota for this route; {later}."),
                    Some([name]),
                )
            }
            Decision::Unavailable {
                cause: Cause::StoreUnavailable,
                ..
            } => (
                format!("Rate limiting is temporarily unavailable; {later}."),
                None,
            ),
            // Shard full, tenant share and table full read the same: which of them, and how
            // full anything is, is not the caller's business.
            _ => (format!("The service is at capacity; {later}."), None),
        };
        Some(Problem {
            type_uri: catalog.type_uri.as_str(),
            title,
            status,
            detail,
            code: catalog.code.as_str(),
            request_id: self.request_id.as_str(),
            retry_after,
            violated_policies: violated,
        })
    }

    /// The whole refusal response (status, headers, `application/problem+json` body); `None`
    /// for [`Decision::Admit`]. `B` is any body type that can be made from bytes (axum's
    /// `Body`, `Full<Bytes>`, `Vec<u8>`, ...).
    pub fn refusal<B: From<Vec<u8>>>(&self) -> Option<Response<B>> {
        let problem = self.problem()?;
        let body = serde_json::to_vec(&problem).expect("a problem always serializes");
        let mut response = Response::new(B::from(body));
        *response.status_mut() =
            StatusCode::from_u16(problem.status).expect("429 and 503 are valid statuses");
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        self.write_headers(headers);
        Some(response)
    }
}

fn bucket_policy(bucket: BucketKind) -> &'static str {
    match bucket {
        BucketKind::Burst => BURST_POLICY,
        BucketKind::Sustained => SUSTAINED_POLICY,
    }
}

/// Combines the decisions of several limiters (gateway, application, ...) into the one a
/// response carries, keeping every layer's own answer for telemetry.
///
/// The order, most restrictive first:
/// 1. `Unavailable` with an unknown wait (`retry_after: None`): the wait is unknown, so no
///    `Retry-After` is sent, even if another layer knows a wait (a known wait would understate
///    an unknown one, and none is invented). Among several, `StoreUnavailable` is chosen before
///    `TableFull`, so that the caller learns the limiter itself is the problem.
/// 2. `Unavailable` with a known wait: status 503 with that layer's cause, and `Retry-After`
///    the longest wait of **all** refusing layers (a request that also waits for its own
///    bucket is not admitted sooner). Every such wait is this caller's own or the capacity
///    window, so none is a neighbour's.
/// 3. `Throttle`: 429 with the longest wait among throttling layers and that layer's bucket.
/// 4. `Admit` when every layer admits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Combined {
    layers: Vec<LayerDecision>,
}

/// One limiter's own decision inside a [`Combined`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerDecision {
    /// Which limiter (for telemetry, e.g. `"gateway"`, `"application"`).
    pub layer: &'static str,
    /// What it decided.
    pub decision: Decision,
}

impl Combined {
    /// No layer yet (combines to `Admit`).
    pub fn new() -> Self {
        Combined::default()
    }

    /// Records one layer's decision.
    pub fn push(&mut self, layer: &'static str, decision: Decision) -> &mut Self {
        self.layers.push(LayerDecision { layer, decision });
        self
    }

    /// Every layer's own decision, in the order pushed.
    pub fn layers(&self) -> &[LayerDecision] {
        &self.layers
    }

    /// The combined decision (see the type's docs for the order).
    pub fn decision(&self) -> Decision {
        combine(self.layers.iter().map(|l| l.decision))
    }
}

/// The most restrictive of `decisions` with the longest known wait; see [`Combined`].
pub fn combine(decisions: impl IntoIterator<Item = Decision>) -> Decision {
    let mut unknown: Option<Cause> = None;
    let mut unavailable: Option<(Duration, Cause)> = None;
    let mut throttle: Option<(Duration, BucketKind)> = None;
    for d in decisions {
        match d {
            Decision::Admit => {}
            Decision::Throttle {
                retry_after,
                bucket,
            } => {
                if throttle.is_none_or(|(w, _)| retry_after > w) {
                    throttle = Some((retry_after, bucket));
                }
            }
            Decision::Unavailable {
                retry_after: None,
                cause,
            } => {
                if unknown.is_none() || cause == Cause::StoreUnavailable {
                    unknown = Some(cause);
                }
            }
            Decision::Unavailable {
                retry_after: Some(w),
                cause,
            } => {
                if unavailable.is_none_or(|(u, _)| w > u) {
                    unavailable = Some((w, cause));
                }
            }
        }
    }
    if let Some(cause) = unknown {
        Decision::Unavailable {
            retry_after: None,
            cause,
        }
    } else if let Some((wait, cause)) = unavailable {
        Decision::Unavailable {
            retry_after: Some(throttle.map_or(wait, |(t, _)| t.max(wait))),
            cause,
        }
    } else if let Some((retry_after, bucket)) = throttle {
        Decision::Throttle {
            retry_after,
            bucket,
        }
    } else {
        Decision::Admit
    }
}
