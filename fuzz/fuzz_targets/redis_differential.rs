//! The `redis_differential` target: see `testkit/src/fuzz/redis_differential.rs` for what it
//! checks. One `redis-server` for the whole process (started on the first input, killed by the
//! kernel when the process exits); `tests/redis/differential.rs` replays the checked-in corpus
//! (`fuzz/corpus/redis_differential/`) on stable against a server of its own.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tollgate_testkit::fuzz::redis_differential::{check, Harness};

static HARNESS: OnceLock<Harness> = OnceLock::new();

fuzz_target!(|data: &[u8]| check(HARNESS.get_or_init(Harness::start), data));
