//! The `rls_request` target: see `testkit/src/fuzz/rls_request.rs` for what it checks. The same
//! function replays the checked-in corpus (`fuzz/corpus/rls_request/`) on stable in
//! `server/tests/rls/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tollgate_testkit::fuzz::rls_request::check(data));
