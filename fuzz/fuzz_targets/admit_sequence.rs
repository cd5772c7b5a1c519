//! The `admit_sequence` target: see `testkit/src/fuzz/admit_sequence.rs` for what it checks. The same function
//! replays the checked-in corpus (`fuzz/corpus/admit_sequence/`) on stable in `tests/engine/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tollgate_testkit::fuzz::admit_sequence::check(data));
