//! The `ffi_calls` target: see `testkit/src/fuzz/ffi_calls.rs` for what it checks. The same function
//! replays the checked-in corpus (`fuzz/corpus/ffi_calls/`) on stable in `tests/engine/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tollgate_testkit::fuzz::ffi_calls::check(data));
