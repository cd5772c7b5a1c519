//! The `admit_sequence` target: see `fuzz/checks/admit_sequence.rs` for what it checks. The same function replays
//! the checked-in corpus (`fuzz/corpus/admit_sequence/`) on stable in `tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod check {
    include!("../checks/admit_sequence.rs");
}

fuzz_target!(|data: &[u8]| check::check(data));
