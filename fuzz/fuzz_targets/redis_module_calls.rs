//! The `redis_module_calls` target: see `testkit/src/fuzz/redis_module_calls.rs` for what it
//! checks. One `redis-server` loading tollgate's module for the whole process (started on the
//! first input, killed by the kernel when the process exits); `tests/redis/module_calls.rs`
//! replays the checked-in corpus (`fuzz/corpus/redis_module_calls/`) and seeded random inputs
//! on stable. Needs the module built (`TOLLGATE_REDIS_MODULE`, or built on first use).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tollgate_testkit::fuzz::redis_module_calls::{check, Harness};

static HARNESS: OnceLock<Harness> = OnceLock::new();

fuzz_target!(|data: &[u8]| check(HARNESS.get_or_init(Harness::start), data));
