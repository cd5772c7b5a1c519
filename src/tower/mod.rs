//! [`RateLimitLayer`]: per-request admission for axum, tonic and any tower stack.
//!
//! For every request the layer
//! 1. finds the route class from the profile's `routes` (a [`RouteTable`]: method and path glob,
//!    first match wins; the globs are compiled once per profile, not per request). A request
//!    that matches no route is **passed through unlimited and untouched**: the profile decides
//!    what is limited, and a route left out of it (health checks, the discovery document) stays
//!    free;
//! 2. takes the request id from a well-formed `X-Request-Id`, or generates one, and puts it back
//!    on the request so that handlers log the same id;
//! 3. asks a [`KeyExtractor`] who is calling: the [`VerifiedIdentity`] that the service's own
//!    authentication layer put in the request extensions, or else the peer address (believing
//!    `Forwarded` / `X-Forwarded-For` only from trusted proxy networks);
//! 4. asks the [`Admission`] backend (a [`Limiter`](crate::Limiter), or the Redis limiter) for a
//!    decision, and answers a refusal itself with [`crate::http::Answer::refusal`], or calls the
//!    inner service and adds `RateLimit-Policy` (and, when opted in, `RateLimit`) to its
//!    response.
//!
//! `poll_ready` only delegates to the inner service: the limit is enforced per request, never
//! by withholding readiness, so one caller's refusals never stall another's requests.
//!
//! A route class in shadow mode (`mode: shadow` on the class or the profile) lets a refused
//! request through: the backend says so in its [`Verdict`](crate::Verdict), and the refusal
//! that would have been made is still reported in [`RateLimitOutcome`].
//!
//! The files, one idea each: `layer` (configuration only), `state` (what every clone shares:
//! the backend, the extractor, the routes compiled for the profile in force), `service` (the
//! tower service), `future` (the response future), `outcome` (what the layer decided). Who is
//! calling and which route it is are HTTP questions, answered in [`crate::http`]; their types
//! are re-exported here so that `tollgate::tower::{PeerExtractor, Cidr, ...}` keeps working.
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
mod layer;
mod outcome;
mod service;
mod state;

pub use future::ResponseFuture;
pub use layer::RateLimitLayer;
pub use outcome::RateLimitOutcome;
pub use service::RateLimit;

pub use crate::admission::Admission;
pub use crate::http::{
    Caller, Cidr, CidrError, ForwardedHeader, KeyExtractor, PeerExtractor, RouteEntry, RouteTable,
    VerifiedIdentity,
};
