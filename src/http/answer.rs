//! A [`Decision`] as an HTTP response, in one place that every server integration uses.

use ::http::header::{HeaderMap, HeaderValue, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use ::http::{Response, StatusCode};

use super::grpc::write_grpc_status;
use super::headers::{remaining_header, RATELIMIT, RATELIMIT_POLICY, X_REQUEST_ID};
use super::problem::{Problem, PROBLEM_JSON};
use super::request_id::RequestId;
use crate::decision::Decision;
use crate::decision::Remaining;
use crate::profile::{Profile, RouteClassLimits};

/// What a response says about one request's rate limiting: the decision, the profile, the
/// request id, the caller's own policy and, where the profile opts in, the caller's own
/// remaining tokens. It writes the headers of an admitted response, or the whole refusal; see
/// the [module docs](super) for what each decision gets.
#[derive(Clone, Copy, Debug)]
pub struct Answer<'a> {
    decision: Decision,
    profile: &'a Profile,
    request_id: &'a RequestId,
    policy: Option<&'a HeaderValue>,
    remaining: Option<(Remaining, &'a RouteClassLimits)>,
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

    /// Adds `RateLimit-Policy` (from [`policy_header`](super::policy_header) of the caller's
    /// route class).
    pub fn with_policy(mut self, policy: &'a HeaderValue) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Adds the caller's own remaining tokens (from `Limiter::remaining` of the caller's key)
    /// and the caller's route class `limits` (for `t`, the seconds until the quota is restored).
    /// Sent only when the profile's `expose_remaining` is true.
    pub fn with_remaining(
        mut self,
        remaining: Option<Remaining>,
        limits: &'a RouteClassLimits,
    ) -> Self {
        self.remaining = remaining.map(|r| (r, limits));
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
        headers.insert(X_REQUEST_ID, self.request_id.header_value().clone());
        if let Some(policy) = self.policy {
            headers.insert(RATELIMIT_POLICY, policy.clone());
        }
        if self.profile.expose_remaining {
            if let Some((r, limits)) = self.remaining {
                headers.insert(RATELIMIT, remaining_header(r, limits));
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
        Problem::refusing(
            self.decision,
            self.profile,
            self.request_id,
            self.retry_after_secs(),
        )
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

    /// The refusal of a gRPC request (see [`is_grpc`](super::is_grpc)): a trailers-only
    /// response, HTTP 200 with `grpc-status` (`RESOURCE_EXHAUSTED` for 429, `UNAVAILABLE` for
    /// 503), the problem's `detail` as `grpc-message`, `grpc-retry-pushback-ms` where there is a
    /// wait, the rate-limit headers as metadata, and an empty body (`B::default()`); `None` for
    /// [`Decision::Admit`].
    pub fn grpc_refusal<B: Default>(&self) -> Option<Response<B>> {
        let problem = self.problem()?;
        let mut response = Response::new(B::default());
        let headers = response.headers_mut();
        self.write_headers(headers);
        write_grpc_status(
            headers,
            &self.decision,
            &problem.detail,
            self.profile.retry_after.max.get(),
        );
        Some(response)
    }
}
