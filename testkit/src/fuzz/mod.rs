//! The fuzz targets' checks, one per target: each panics on a failed check. `fuzz/` drives them
//! with libFuzzer; `tests/engine/fuzz_corpus.rs` replays the checked-in corpora through them on stable.

pub mod admit_sequence;
pub mod ffi_calls;
pub mod profile_yaml;
pub mod retry_after;
pub mod snapshot_reader;
