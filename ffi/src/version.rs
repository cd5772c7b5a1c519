//! The library's version.

use core::ffi::c_char;

use crate::panic::panic_boundary;

/// The library's version, as a static NUL-terminated string (`"0.1.0"`).
#[no_mangle]
pub extern "C" fn tg_version() -> *const c_char {
    panic_boundary(|| {
        concat!(env!("CARGO_PKG_VERSION"), "\0")
            .as_ptr()
            .cast::<c_char>()
    })
}
