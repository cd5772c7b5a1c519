//! The HTTP contract, needing only the `http` crate: who is asking, which route class a request
//! belongs to, and how a [`Decision`](crate::Decision) becomes a response. Every server
//! integration (the [`tower`](crate::tower) layer, the demo gateway, a hand-written handler)
//! goes through these pieces, so that all of them answer alike.
//!
//! | file | idea |
//! | --- | --- |
//! | `answer` | [`Answer`]: a decision to status, headers and body |
//! | `problem` | [`Problem`]: the RFC 9457 body of a refusal |
//! | `grpc` | a refusal as a gRPC status ([`is_grpc`], `grpc-status`, `grpc-retry-pushback-ms`) |
//! | `headers` | `RateLimit-Policy`, `RateLimit` and the other header names and values |
//! | `request_id` | [`RequestId`]: the caller's `X-Request-Id`, checked, or a fresh one |
//! | `combine` | [`Combined`]: the answer of several limiters on one request |
//! | `caller` | [`Caller`], [`KeyExtractor`], [`PeerExtractor`]: whose bucket a request is charged to |
//! | `cidr` | [`Cidr`]: trusted proxy networks |
//! | `forwarded` | [`ForwardedHeader`]: reading `X-Forwarded-For` / `Forwarded` from the right |
//! | `routes` | [`RouteTable`]: the profile's method and path globs, compiled |
//! | `user_agent` | [`SdkMatcher`]: the `User-Agent` product token as a bounded SDK label |
//! | [`admin`] | `GET` / `PUT /admin/profile`: the profile replaced at run time, token and loopback checked |
//!
//! What a response says:
//!
//! | decision | status | headers | body |
//! | --- | --- | --- | --- |
//! | `Admit` | the handler's | `RateLimit-Policy`, `RateLimit` (opt-in), `X-Request-Id` ([`Answer`]; the tower layer only when asked) | the handler's |
//! | `Throttle` | 429 | the above with `X-Request-Id`, `Retry-After`, `Cache-Control: no-store` | [`Problem`] |
//! | `Unavailable` | 503 | the above, `Retry-After` only where computable, `Cache-Control: no-store` | [`Problem`] |
//! | refusal of a gRPC request ([`is_grpc`]) | 200 | the above, `grpc-status` 8 (for 429) or 14 (for 503), `grpc-message`, `grpc-retry-pushback-ms` where there is a wait ([`Answer::grpc_refusal`]) | none (trailers-only) |
//!
//! Nothing written here is computed from another caller: the wait is the caller's own bucket or
//! the capacity window (the same for everyone), the remaining tokens are the caller's own, and
//! the detail texts are fixed sentences.
//!
//! The tower layer can add the legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset` (the
//! caller's tightest bucket; `RateLimitLayer::legacy_headers`) and let a hook shape the refusal
//! (`RateLimitLayer::on_refusal`); the headers above stay on the hook's response.
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

pub mod admin;
mod answer;
mod caller;
mod cidr;
mod combine;
mod forwarded;
mod grpc;
mod headers;
mod problem;
mod request_id;
mod routes;
mod user_agent;

pub use answer::Answer;
pub use caller::{Caller, KeyExtractor, PeerExtractor, VerifiedIdentity};
pub use cidr::{Cidr, CidrError};
pub use combine::{combine, Combined, LayerDecision};
pub use forwarded::ForwardedHeader;
pub use grpc::{
    grpc_status, is_grpc, percent_encode_message, retry_pushback_ms, GRPC_MESSAGE,
    GRPC_RESOURCE_EXHAUSTED, GRPC_RETRY_PUSHBACK_MS, GRPC_STATUS, GRPC_UNAVAILABLE,
};
pub use headers::{
    policy_header, remaining_header, BURST_POLICY, RATELIMIT, RATELIMIT_POLICY, SUSTAINED_POLICY,
    X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET, X_REQUEST_ID,
};
#[cfg(feature = "tower")]
pub(crate) use headers::{Policy, Quota};
pub use problem::{Problem, PROBLEM_JSON};
pub use request_id::{RequestId, MAX_REQUEST_ID_LEN};
pub use routes::{RouteEntry, RouteTable};
pub use user_agent::{SdkLabel, SdkMatcher, MAX_SCANNED_BYTES, MAX_SCANNED_PRODUCTS};
