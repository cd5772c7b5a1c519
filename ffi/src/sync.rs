//! The one module of the C ABI that names atomics (as `src/sync.rs` is for the engine).
//!
//! These are std's, also under `--cfg tollgate_loom`: the handle's words (catalog-code pointers,
//! the route-class count) are not part of the table the loom models check, and loom's types only
//! work inside a model, which a C caller never runs. The orderings are exercised by the C ABI's
//! tests, and under AddressSanitizer by `.ci/run`.

pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
