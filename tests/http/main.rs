//! The HTTP contract, the tower layer and the demo gateway: one test binary (`tower` feature).
#![cfg(feature = "tower")]

#[path = "../../examples/gateway/app.rs"]
#[allow(dead_code)]
mod app;
#[path = "../../examples/gateway/serve.rs"]
#[allow(dead_code)]
mod serve;
#[path = "../../examples/storm/storm.rs"]
mod storm;

mod caller;
mod flood;
mod gateway_limits;
mod gateway_tcp;
mod grpc;
mod layer;
mod response;
mod retry_storm;
mod routes;
