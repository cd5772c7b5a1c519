//! `tg_error_message`: the sentence of a result code, copied into the caller's buffer.

use core::ffi::c_char;

use crate::args::out_arg;
use crate::panic::panic_boundary;
use crate::tg_result;

/// The message for a number that is no `tg_result`.
pub(crate) const UNKNOWN_RESULT_MESSAGE: &str = "unknown tollgate result code";
const _: () = assert!(UNKNOWN_RESULT_MESSAGE.len() < crate::TG_ERROR_MESSAGE_CAPACITY);

/// Writes the message of result code `result` to `buf` (at most `len` bytes, NUL included) and
/// its length without the NUL to `*out_n`. A buffer of `TG_ERROR_MESSAGE_CAPACITY` bytes is
/// always enough; a smaller one that cannot hold the message gives `TG_RESULT_BUFFER_TOO_SMALL`
/// and nothing written. Numbers that are no result code get a message too.
///
/// # Safety
/// `buf` is NULL or valid for writes of `len` bytes; `out_n` is NULL or valid for a write of
/// one `size_t`.
#[no_mangle]
pub unsafe extern "C" fn tg_error_message(
    result: u32,
    buf: *mut c_char,
    len: usize,
    out_n: *mut usize,
) -> tg_result {
    panic_boundary(|| {
        let buf = out_arg(buf)?;
        let out_n = out_arg(out_n)?;
        if len > isize::MAX as usize {
            return Err(tg_result::LengthOverflow);
        }
        let msg = tg_result::from_u32(result).map_or(UNKNOWN_RESULT_MESSAGE, tg_result::message);
        if msg.len() >= len {
            return Err(tg_result::BufferTooSmall);
        }
        // SAFETY: 1. `buf` is not NULL (checked) and valid for `len` bytes (caller's contract),
        // and `msg.len() + 1 <= len` (checked). 2. `msg` is a static string, so the two do not
        // overlap. 3. `out_n` is not NULL (checked) and valid for a write (caller's contract).
        unsafe {
            core::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), msg.len());
            buf.add(msg.len()).write(0);
            out_n.write(msg.len());
        }
        Ok(())
    })
}
