//! The `retry_after` target: see `testkit/src/fuzz/retry_after.rs` for what it checks. The same function
//! replays the checked-in corpus (`fuzz/corpus/retry_after/`) on stable in `tests/engine/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tollgate_testkit::fuzz::retry_after::check(data));
