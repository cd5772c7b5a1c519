//! tollgate-server: tollgate as an Envoy rate limit service.
//!
//! It serves `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` (gRPC, tonic, the
//! protos of the `envoy-types` crate) over the embedded [`tollgate::Limiter`] or, with the
//! `redis` feature, over Redis; and an HTTP side with `/healthz`, the discovery document,
//! Prometheus metrics and `POST /json`.
//!
//! A request's descriptors are mapped to keys by the profile's `descriptors:` rules
//! ([`mapping`]); each is charged its `hits_addend` (the engine's weighted cost); all are
//! admitted or none is ([`tollgate::Admission::admit_all`], which gives back exactly what the
//! descriptors before a refusal took). A refusal of
//! the caller's own quota is `OVER_LIMIT` (Envoy answers 429 with the headers and problem
//! body given here); shared capacity or the store is the gRPC status `UNAVAILABLE` (Envoy,
//! with `failure_mode_deny: true` and `status_on_error: 503`, answers 503).
//!
//! | file | idea |
//! | --- | --- |
//! | `backend` | [`Backend`]: the embedded limiter or Redis |
//! | `mapping` | [`Mapping`]: the profile's descriptor rules, compiled |
//! | `request` | what a well-formed request is, and each descriptor's cost |
//! | `decide` | [`RateLimiter`]: one `ShouldRateLimit`, and reload |
//! | `response` | a decision as a `RateLimitResponse` |
//! | `grpc`, `http`, `json` | the two faces, and the JSON form of the messages |
//! | `reload`, `serve`, `metrics` | SIGHUP and file change, the listeners, the server's counters |
//! | `admin` | `GET` / `PUT /admin/profile` on the HTTP side, behind a token, loopback only |
//! | `state` | `--state`: quotas restored on start, checkpointed, saved on shutdown |
//! | `publish` | `tollgate-server publish`: validate a profile and publish it to Redis |
//! | `fleet` | `--watch-profile`: follow the profile published to Redis (feature `redis`) |
#![warn(missing_docs)]

pub mod admin;
pub mod backend;
pub mod decide;
#[cfg(feature = "redis")]
pub mod fleet;
pub mod grpc;
pub mod http;
pub mod json;
pub mod mapping;
pub mod metrics;
pub mod publish;
pub mod reload;
pub mod request;
pub mod response;
pub mod serve;

pub use backend::Backend;
pub use decide::RateLimiter;
pub use mapping::Mapping;
pub use serve::{serve, serve_with, Policies};

/// The Envoy protos this server speaks, re-exported so that clients need no version match.
pub use envoy_types;
