//! tollgate: an embedded admission engine for HTTP APIs.
#![warn(missing_docs, unsafe_op_in_unsafe_fn)]

#[cfg(feature = "client")]
pub mod client;
