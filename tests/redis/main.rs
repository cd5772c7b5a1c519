//! The Redis backend against a real `redis-server` that each test starts on a free loopback
//! port (`redis` feature; `.ci/run` installs the server). Without a server installed the tests
//! fail, saying how to install it.
#![cfg(feature = "redis")]

mod acks;
mod decisions;
mod differential;
mod fleet;
mod lease;
mod module;
mod module_calls;
mod outage;
mod reload;
#[cfg(feature = "metrics")]
mod telemetry;
mod weighted;
mod workers;
