//! The `ffi_calls` target: see `fuzz/checks/ffi_calls.rs` for what it checks. The same function replays
//! the checked-in corpus (`fuzz/corpus/ffi_calls/`) on stable in `tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod check {
    include!("../checks/ffi_calls.rs");
}

fuzz_target!(|data: &[u8]| check::check(data));
