//! tollgate's demo gateway as a library, for its binary (`tollgate-gateway`), its tests and the
//! retry storms (`examples/storm`), which put it behind faults: [`app`] is the API's router
//! (bearer tokens, tollgate's `RateLimitLayer`, the handlers), the operators' router and the
//! Prometheus recorder; [`backend`] what they decide with (the embedded limiter or Redis).
#![warn(missing_docs)]

pub mod app;
pub mod backend;
