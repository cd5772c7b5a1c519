//! The fuzz targets' checks, one per target: each panics on a failed check. `fuzz/` drives them
//! with libFuzzer; `tests/engine/fuzz_corpus.rs` replays the checked-in corpora through them on stable
//! (`rls_request`, behind the `server` feature: `server/tests/rls/fuzz_corpus.rs`).

pub mod admit_sequence;
mod bytes;
pub mod corpus;
pub mod ffi_calls;
#[cfg(feature = "redis")]
pub mod fleet_message;
pub mod profile_yaml;
#[cfg(feature = "redis")]
pub mod redis_differential;
#[cfg(feature = "redis")]
pub mod redis_module_calls;
pub mod retry_after;
#[cfg(feature = "server")]
pub mod rls_request;
pub mod snapshot_reader;
