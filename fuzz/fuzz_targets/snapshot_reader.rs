//! The `snapshot_reader` target: see `testkit/src/fuzz/snapshot_reader.rs` for what it checks. The same function
//! replays the checked-in corpus (`fuzz/corpus/snapshot_reader/`) on stable in `tests/engine/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tollgate_testkit::fuzz::snapshot_reader::check(data));
