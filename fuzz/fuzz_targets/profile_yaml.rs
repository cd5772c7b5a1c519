//! The `profile_yaml` target: see `fuzz/checks/profile_yaml.rs` for what it checks. The same function replays
//! the checked-in corpus (`fuzz/corpus/profile_yaml/`) on stable in `tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod check {
    include!("../checks/profile_yaml.rs");
}

fuzz_target!(|data: &[u8]| check::check(data));
