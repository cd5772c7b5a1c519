//! Why a profile was refused: [`tg_profile_error`], which the `_err` functions fill on failure.
//!
//! This was chosen over a thread-local "last error": the error travels with the call, so it is
//! right in Go (whose goroutines move between OS threads between two cgo calls) and in thread
//! pools, and there is no hidden state to free.

use core::ffi::c_char;

use tollgate::ProfileError;

use crate::tg_result;

/// Bytes in `tg_profile_error`'s `message`, NUL included.
pub const TG_PROFILE_ERROR_MESSAGE_CAPACITY: usize = 512;

/// Why a profile was refused, filled by the `_err` functions on failure. Caller-owned: put it on
/// the stack, pass its address, read it after a failure.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tg_profile_error {
    /// 1-based line of the offending value in the YAML, 0 when unknown.
    pub line: u32,
    /// 1-based column of the offending value, 0 when unknown.
    pub column: u32,
    /// Length in bytes of the whole message, without the NUL. When it is at least
    /// `TG_PROFILE_ERROR_MESSAGE_CAPACITY`, `message` holds a truncated copy.
    pub message_len: usize,
    /// The message naming the field (for codes other than the profile ones, the text of
    /// `tg_error_message`), UTF-8, NUL-terminated, cut at a character boundary if too long.
    pub message: [c_char; TG_PROFILE_ERROR_MESSAGE_CAPACITY],
}

/// A profile error before it is copied out to C.
pub(crate) struct Detail {
    pub(crate) code: tg_result,
    pub(crate) message: String,
    pub(crate) line: Option<usize>,
    pub(crate) column: Option<usize>,
}

impl Detail {
    /// `code` (`InvalidProfile` or `ReloadRefused`) with the profile's own message and position.
    pub(crate) fn profile(code: tg_result, e: &ProfileError) -> Detail {
        Detail {
            code,
            message: e.message().to_owned(),
            line: e.line(),
            column: e.column(),
        }
    }
}

impl From<tg_result> for Detail {
    fn from(code: tg_result) -> Detail {
        Detail {
            code,
            message: code.message().to_owned(),
            line: None,
            column: None,
        }
    }
}

impl tg_profile_error {
    /// The C form of `d`: its message cut at a character boundary to fit with its NUL, its
    /// position clamped to `u32`.
    pub(crate) fn from_detail(d: &Detail) -> tg_profile_error {
        let mut message = [0 as c_char; TG_PROFILE_ERROR_MESSAGE_CAPACITY];
        let mut n = d.message.len().min(TG_PROFILE_ERROR_MESSAGE_CAPACITY - 1);
        while !d.message.is_char_boundary(n) {
            n -= 1;
        }
        for (dst, src) in message.iter_mut().zip(&d.message.as_bytes()[..n]) {
            *dst = *src as c_char;
        }
        let clamp = |v: Option<usize>| v.map_or(0, |v| u32::try_from(v).unwrap_or(u32::MAX));
        tg_profile_error {
            line: clamp(d.line),
            column: clamp(d.column),
            message_len: d.message.len(),
            message,
        }
    }
}

/// Runs `f`; on failure writes the detail to `err` (if not NULL) and returns the code.
///
/// # Safety
/// `err` is NULL or valid for a write of one `tg_profile_error`.
pub(crate) unsafe fn with_detail(
    err: *mut tg_profile_error,
    f: impl FnOnce() -> Result<(), Detail>,
) -> Result<(), tg_result> {
    f().map_err(|d| {
        if !err.is_null() {
            // SAFETY: 1. `err` is not NULL (checked above). 2. The caller guarantees that a
            // non-NULL `err` is valid and aligned for a write of one `tg_profile_error`.
            unsafe { err.write(tg_profile_error::from_detail(&d)) };
        }
        d.code
    })
}
