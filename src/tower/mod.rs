//! [`RateLimitLayer`]: per-request admission for axum, tonic and any tower stack.
//!
//! For every request the layer
//! 1. finds the route class from the profile's `routes` (a [`RouteTable`]: method and path glob,
//!    first match wins; the globs are compiled once per profile, not per request). A request
//!    that matches no route is **passed through unlimited and untouched**: the profile decides
//!    what is limited, and a route left out of it (health checks, the discovery document) stays
//!    free;
//! 2. asks a [`KeyExtractor`] who is calling: the [`VerifiedIdentity`] that the service's own
//!    authentication layer put in the request extensions, or else the peer address (believing
//!    `Forwarded` / `X-Forwarded-For` only from trusted proxy networks);
//! 3. asks the [`Admission`] backend (a [`Limiter`](crate::Limiter), or the Redis limiter) for a
//!    decision, and answers a refusal itself with [`crate::http::Answer::refusal`] (with a request
//!    id: the caller's well-formed `X-Request-Id`, or a generated one; for a gRPC request, a
//!    gRPC status instead, see [`crate::http::is_grpc`]), or calls the inner service and adds
//!    `RateLimit-Policy` (and, when the profile opts in, `RateLimit`) to its response.
//!
//! Request ids on every response and [`RateLimitOutcome`] in the request or response
//! extensions are options of the layer ([`RateLimitLayer::request_id_on_every_response`],
//! [`RateLimitLayer::outcome_in_request`], [`RateLimitLayer::outcome_in_response`]), off by
//! default.
//!
//! What an admitted request costs: with a backend that decides at once (the embedded
//! [`Limiter`](crate::Limiter), through [`Admission::evaluate_now`]) the decision is made in
//! `call` and the response future is a named enum ([`ResponseFuture`]): no allocation. The
//! compiled routes are read from a per-thread cache checked against the backend's
//! [`Admission::generation`], and the policy header's clone copies a pointer. One shared write
//! is left by default: axum clones the route's service for every request, and that clone counts
//! a reference to the layer's state (one cache line every core writes; tower_governor's layer
//! does the same with its config). [`RateLimitLayer::leak`] removes it for a layer built once
//! per process, after which nothing shared is written but the caller's own bucket (and its
//! shard's counter). A backend that waits (Redis) gets one boxed future per limited request.
//!
//! `poll_ready` only delegates to the inner service: the limit is enforced per request, never
//! by withholding readiness, so one caller's refusals never stall another's requests.
//!
//! A route class in shadow mode (`mode: shadow` on the class or the profile) lets a refused
//! request through: the backend says so in its [`Verdict`](crate::Verdict), and the refusal
//! that would have been made is still reported in [`RateLimitOutcome`].
//!
//! With the `metrics` feature, and where the profile lists `observability.sdk_versions`, the
//! layer counts every decision by client SDK (`tollgate_sdk_decisions_total{sdk, outcome}`:
//! the listed `User-Agent` product token, `other` or `none`; see [`crate::http::SdkMatcher`]).
//! A profile that lists none costs one branch: `User-Agent` is not read.
//!
//! The files, one idea each: `layer` (configuration only), `state` (what every clone shares:
//! the backend, the extractor, the routes compiled for the profile in force), `held` (how the
//! services hold that state: counted or leaked), `service` (the
//! tower service), `future` (the response future), `refusal` (the refusal hook, the gRPC
//! answer, the refusal's body type), `outcome` (what the layer decided), `sdk` (the
//! SDK-version counters). Who is calling and which route it is are HTTP questions, answered in
//! [`crate::http`]; their types are re-exported here so that
//! `tollgate::tower::{PeerExtractor, Cidr, ...}` keeps working.
//!
//! ```
//! use std::sync::Arc;
//! use tollgate::http::PeerExtractor;
//! use tollgate::tower::RateLimitLayer;
//! use tollgate::{Limiter, Profile};
//!
//! let limiter = Arc::new(Limiter::builder(Profile::from_path("examples/profiles/example.yaml")?).build()?);
//! let extractor = PeerExtractor::new().trust_proxies(["10.0.0.0/8".parse()?]);
//! let layer = RateLimitLayer::with_extractor(Arc::clone(&limiter), extractor);
//! // axum: Router::new().route(..).layer(layer).layer(your_authentication_layer)
//! # let _ = layer;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod future;
mod held;
mod layer;
mod options;
mod outcome;
mod refusal;
#[cfg(feature = "metrics")]
mod sdk;
mod service;
mod state;

pub use future::ResponseFuture;
pub use layer::RateLimitLayer;
pub use outcome::RateLimitOutcome;
pub use refusal::{BodyFromBytes, RefusalBody, RefusalContext};
pub use service::RateLimit;

pub use crate::admission::Admission;
pub use crate::http::{
    Caller, Cidr, CidrError, ForwardedHeader, KeyExtractor, PeerExtractor, RouteEntry, RouteTable,
    VerifiedIdentity,
};
