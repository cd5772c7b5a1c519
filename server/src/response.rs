//! A decision as Envoy's `RateLimitResponse`: per-descriptor statuses, the headers Envoy adds
//! to its response, and the RFC 9457 body it sends on a 429 (`raw_body`).
//!
//! Everything here is computed from the caller's own descriptors and limits: the refused
//! descriptor's wait, its class's policy, the caller's own remaining tokens (only where the
//! profile's `expose_remaining` says so). Nothing of another tenant is in reach.

use core::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue as EnvoyHeader;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use tollgate::http::{
    Answer, RequestId, BURST_POLICY, PROBLEM_JSON, RATELIMIT_POLICY, SUSTAINED_POLICY,
};
use tollgate::profile::{BucketLimit, RouteClassLimits};
use tollgate::{BucketKind, Decision, Profile, Remaining};

/// Envoy's unit for a bucket whose period is exactly one second, minute, hour, day or week;
/// `None` for any other period (Envoy has no unit for it, and a rounded one would misstate the
/// limit).
pub fn unit_of(per: Duration) -> Option<Unit> {
    match per.as_nanos() {
        n if n == Duration::from_secs(1).as_nanos() => Some(Unit::Second),
        n if n == Duration::from_secs(60).as_nanos() => Some(Unit::Minute),
        n if n == Duration::from_secs(3600).as_nanos() => Some(Unit::Hour),
        n if n == Duration::from_secs(86_400).as_nanos() => Some(Unit::Day),
        n if n == Duration::from_secs(7 * 86_400).as_nanos() => Some(Unit::Week),
        _ => None,
    }
}

fn bucket(limits: &RouteClassLimits, kind: BucketKind) -> (&'static str, &BucketLimit) {
    match kind {
        BucketKind::Burst => (BURST_POLICY, &limits.burst),
        BucketKind::Sustained => (SUSTAINED_POLICY, &limits.sustained),
    }
}

/// `current_limit` for one bucket of a class, where its period is a whole Envoy unit.
pub fn current_limit(limits: &RouteClassLimits, kind: BucketKind) -> Option<RateLimit> {
    let (name, b) = bucket(limits, kind);
    let unit = unit_of(b.per.get())?;
    Some(RateLimit {
        name: name.to_owned(),
        // At most 2^32 - 1 tokens by the profile's own bound.
        requests_per_unit: u32::try_from(b.tokens.get()).unwrap_or(u32::MAX),
        unit: unit as i32,
    })
}

/// The status of one descriptor charged to a key of class `limits`: `kind` is the bucket it
/// reports (the one that refused, or the burst bucket when admitted).
pub fn status(
    code: Code,
    limits: &RouteClassLimits,
    kind: BucketKind,
    wait: Option<Duration>,
    remaining: Option<Remaining>,
) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        current_limit: current_limit(limits, kind),
        limit_remaining: remaining.map_or(0, |r| {
            let left = match kind {
                BucketKind::Burst => r.burst,
                BucketKind::Sustained => r.sustained,
            };
            u32::try_from(left).unwrap_or(u32::MAX)
        }),
        duration_until_reset: wait.map(pb_duration),
        quota: None,
    }
}

/// A descriptor no rule limits, or one not reached because another refused first.
pub fn status_ok() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..DescriptorStatus::default()
    }
}

/// An exact wait as a protobuf `Duration`.
pub fn pb_duration(d: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

/// The headers of `map` as Envoy's header list.
pub fn envoy_headers(map: &HeaderMap) -> Vec<EnvoyHeader> {
    map.iter()
        .map(|(k, v)| EnvoyHeader {
            key: k.as_str().to_owned(),
            value: v.to_str().unwrap_or_default().to_owned(),
            raw_value: Vec::new(),
        })
        .collect()
}

/// The answer admitting a request: every descriptor's status and, for the first limited one,
/// its class's `RateLimit-Policy`.
pub fn admitted(
    statuses: Vec<DescriptorStatus>,
    policy: Option<&HeaderValue>,
) -> RateLimitResponse {
    let mut headers = HeaderMap::new();
    if let Some(p) = policy {
        headers.insert(RATELIMIT_POLICY, p.clone());
    }
    RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses,
        response_headers_to_add: envoy_headers(&headers),
        ..RateLimitResponse::default()
    }
}

/// The answer refusing a request for the caller's own quota (Envoy answers 429): the statuses,
/// `Retry-After`, `RateLimit-Policy`, `X-Request-Id`, `Cache-Control: no-store`, the content
/// type, and the problem body in `raw_body`.
pub fn over_limit(
    statuses: Vec<DescriptorStatus>,
    decision: Decision,
    profile: &Profile,
    request_id: &RequestId,
    policy: &HeaderValue,
) -> RateLimitResponse {
    let answer = Answer::new(decision, profile, request_id).with_policy(policy);
    let mut headers = HeaderMap::new();
    answer.write_headers(&mut headers);
    let body = answer
        .problem()
        .map(|p| serde_json::to_vec(&p).expect("a problem always serializes"))
        .unwrap_or_default();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    RateLimitResponse {
        overall_code: Code::OverLimit as i32,
        statuses,
        response_headers_to_add: envoy_headers(&headers),
        raw_body: body,
        ..RateLimitResponse::default()
    }
}
