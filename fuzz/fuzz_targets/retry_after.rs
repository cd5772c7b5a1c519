//! The `retry_after` target: see `fuzz/checks/retry_after.rs` for what it checks. The same function replays
//! the checked-in corpus (`fuzz/corpus/retry_after/`) on stable in `tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod check {
    include!("../checks/retry_after.rs");
}

fuzz_target!(|data: &[u8]| check::check(data));
