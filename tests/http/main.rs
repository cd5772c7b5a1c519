//! The HTTP contract and the tower layer: one test binary (`tower` feature). The demo
//! gateway's own tests are in `gateway/tests/`.
#![cfg(feature = "tower")]

mod caller;
mod grpc;
mod layer;
mod layer_state;
mod response;
mod routes;
mod sdk_label;
