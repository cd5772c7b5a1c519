//! The fuzz targets' checks, one per target: each panics on a failed check. `fuzz/` drives them
//! with libFuzzer; `tests/engine/fuzz_corpus.rs` replays the checked-in corpora through them on stable.

pub mod admit_sequence;
pub mod ffi_calls;
#[cfg(feature = "redis")]
pub mod fleet_message;
pub mod profile_yaml;
#[cfg(feature = "redis")]
pub mod redis_differential;
pub mod retry_after;
pub mod snapshot_reader;
