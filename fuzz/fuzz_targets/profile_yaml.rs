//! The `profile_yaml` target: see `testkit/src/fuzz/profile_yaml.rs` for what it checks. The same function
//! replays the checked-in corpus (`fuzz/corpus/profile_yaml/`) on stable in `tests/engine/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tollgate_testkit::fuzz::profile_yaml::check(data));
