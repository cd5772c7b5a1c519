//! The `fleet_message` target: see `testkit/src/fuzz/fleet_message.rs` for what it checks. The same function
//! replays the checked-in corpus (`fuzz/corpus/fleet_message/`) on stable in `tests/redis/fleet.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tollgate_testkit::fuzz::fleet_message::check(data));
