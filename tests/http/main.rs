//! The HTTP contract, the tower layer and the demo gateway: one test binary (`tower` feature).
#![cfg(feature = "tower")]

#[path = "../../examples/gateway/admin.rs"]
#[allow(dead_code)]
mod admin;
#[path = "../../examples/gateway/app.rs"]
#[allow(dead_code)]
mod app;
#[path = "../../examples/gateway/state.rs"]
#[allow(dead_code)]
mod state;

mod admin_routes;
mod caller;
mod flood;
mod gateway_listener;
mod gateway_state;
mod gateway_tcp;
mod grpc;
mod layer;
mod layer_state;
mod observability_files;
mod response;
mod routes;
mod sdk_label;
