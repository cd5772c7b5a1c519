//! Helpers for tollgate's tests, benches, fuzz targets and loom models: written once here
//! instead of in every test binary. Not published.
//!
//! - [`model`]: profiles with chosen numbers, a limiter on a mock clock, and the reference model
//!   (integers, no atomics) that property tests compare the limiter with;
//! - [`metrics`]: what a `metrics-util` debugging recorder collected, by name and labels;
//! - [`redis_server`]: a `redis-server` of the test's own on a free loopback port;
//! - [`redis_module`]: tollgate's Redis module, built on first use, and a server loading it;
//! - [`redis_cluster`], [`redis_sentinel`]: a 3+3 Redis Cluster, and a primary, a replica and
//!   three Sentinels, built from [`redis_node`]s;
//! - [`fuzz`]: the check each fuzz target runs, shared with the corpus replay test.

pub mod fuzz;
pub mod metrics;
pub mod model;
mod module_build;
pub mod redis_cluster;
pub mod redis_module;
pub mod redis_node;
mod redis_process;
pub mod redis_sentinel;
pub mod redis_server;
mod resp;

pub use model::*;
