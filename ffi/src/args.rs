//! Pointer and length arguments from C: checked here, before anything reads through them.
//!
//! A NULL pointer is `TG_RESULT_NULL_ARGUMENT` (for strings even with a length of 0), a length
//! above `PTRDIFF_MAX` is `TG_RESULT_LENGTH_OVERFLOW`; only then are the bytes read, and only
//! during the call.

use core::ffi::c_char;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::tg_result;

/// The longest tenant or principal id that `tg_admit` takes, in bytes.
pub const TG_MAX_ID_LEN: usize = 1024;
const _: () = assert!(TG_MAX_ID_LEN == tollgate::MAX_ID_LEN);

/// Bytes from C: not NULL, at most `isize::MAX` long.
///
/// # Safety
/// A non-NULL `ptr` is valid for reads of `len` bytes during `'a`, not written meanwhile.
#[inline]
pub(crate) unsafe fn bytes_arg<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], tg_result> {
    if ptr.is_null() {
        return Err(tg_result::NullArgument);
    }
    if len > isize::MAX as usize {
        return Err(tg_result::LengthOverflow);
    }
    // SAFETY: 1. `ptr` is not NULL (checked), and `u8` needs no alignment. 2. `len` is at most
    // `isize::MAX` (checked). 3. The caller guarantees `len` readable bytes at `ptr`, not
    // written during `'a`.
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// A UTF-8 string from C as pointer and length.
///
/// # Safety
/// As `bytes_arg`.
#[inline]
pub(crate) unsafe fn str_arg<'a>(ptr: *const c_char, len: usize) -> Result<&'a str, tg_result> {
    // SAFETY: 1. The caller's guarantees are those `bytes_arg` needs. 2. `c_char` and `u8` have
    // the same size and alignment.
    let bytes = unsafe { bytes_arg(ptr.cast::<u8>(), len) }?;
    // Ids are nearly always ASCII, which `ascii` checks a word at a time; `from_utf8` walks a
    // string this short byte by byte (about 135 instructions for a 14-byte id, callgrind), which
    // made the two checks of `tg_admit` cost half as much as the decision itself.
    if ascii(bytes) {
        // SAFETY: ASCII bytes are valid UTF-8.
        return Ok(unsafe { core::str::from_utf8_unchecked(bytes) });
    }
    core::str::from_utf8(bytes).map_err(|_| tg_result::InvalidUtf8)
}

/// `tg_admit`'s tenant and principal in the usual case, checked together: neither NULL, each
/// 1 to `TG_MAX_ID_LEN` bytes, both ASCII. `None` for anything else, which the caller then
/// checks an argument at a time for the error to report (or finds valid, non-ASCII UTF-8).
///
/// # Safety
/// As `bytes_arg`, for each.
#[inline(always)]
pub(crate) unsafe fn usual_ids<'a>(
    (tenant, tenant_len): (*const c_char, usize),
    (principal, principal_len): (*const c_char, usize),
) -> Option<(&'a str, &'a str)> {
    // One compare for both lengths: `len - 1` wraps an empty id to `usize::MAX`, and with a
    // power of two for the limit, the OR of both is below it only when each is.
    const _: () = assert!(TG_MAX_ID_LEN.is_power_of_two() && TG_MAX_ID_LEN <= isize::MAX as usize);
    let too_long = (tenant_len.wrapping_sub(1) | principal_len.wrapping_sub(1)) >= TG_MAX_ID_LEN;
    if tenant.is_null() | principal.is_null() | too_long {
        return None;
    }
    // SAFETY: 1. Neither pointer is NULL and neither length above `TG_MAX_ID_LEN`, which is
    // below `isize::MAX` (checked). 2. `u8` needs no alignment. 3. The caller guarantees the
    // bytes readable and unwritten during `'a`.
    let (tenant, principal) = unsafe {
        (
            core::slice::from_raw_parts(tenant.cast::<u8>(), tenant_len),
            core::slice::from_raw_parts(principal.cast::<u8>(), principal_len),
        )
    };
    // Both of the usual 8 to 16 bytes: one test of four words for the two.
    let ascii = if is_short(tenant) & is_short(principal) {
        (short_words(tenant) | short_words(principal)) & HIGH_BITS == 0
    } else {
        ascii(tenant) && ascii(principal)
    };
    if !ascii {
        return None;
    }
    // SAFETY: ASCII bytes are valid UTF-8.
    Some(unsafe {
        (
            core::str::from_utf8_unchecked(tenant),
            core::str::from_utf8_unchecked(principal),
        )
    })
}

/// `bytes.is_ascii()`, in two overlapping word loads for ids of 8 to 16 bytes (the usual
/// tenant and user ids), where the standard library's check, built for long strings, takes
/// about 30 instructions an id.
#[inline]
fn ascii(bytes: &[u8]) -> bool {
    if is_short(bytes) {
        short_words(bytes) & HIGH_BITS == 0
    } else {
        bytes.is_ascii()
    }
}

/// The high bit of every byte of a word: all clear for ASCII.
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// Whether `bytes` is 8 to 16 bytes long, which `short_words` covers.
#[inline(always)]
fn is_short(bytes: &[u8]) -> bool {
    (8..=16).contains(&bytes.len())
}

/// The OR of the first and the last 8 bytes of an 8- to 16-byte slice, as a word: between them
/// they cover every byte once or twice.
#[inline(always)]
fn short_words(bytes: &[u8]) -> u64 {
    let word = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap());
    word(0) | word(bytes.len() - 8)
}

/// An IP address from C: 4 bytes (IPv4) or 16 (IPv6), in network byte order.
///
/// # Safety
/// A non-NULL `ptr` is valid for reads of `len` bytes during the call.
#[inline]
pub(crate) unsafe fn ip_arg(ptr: *const u8, len: usize) -> Result<IpAddr, tg_result> {
    if ptr.is_null() {
        return Err(tg_result::NullArgument);
    }
    Ok(match len {
        // SAFETY: 1. `ptr` is not NULL (checked) and valid for `len` bytes (caller's contract),
        // which is 4 here. 2. `read_unaligned` needs no alignment.
        4 => IpAddr::V4(Ipv4Addr::from(unsafe {
            ptr.cast::<[u8; 4]>().read_unaligned()
        })),
        // SAFETY: 1. As above, with 16 bytes. 2. As above.
        16 => IpAddr::V6(Ipv6Addr::from(unsafe {
            ptr.cast::<[u8; 16]>().read_unaligned()
        })),
        _ => return Err(tg_result::InvalidIpLength),
    })
}

/// An output argument from C, checked not NULL, for the one write of an answer: made by
/// [`Out::new`], whose contract is what makes [`Out::put`] safe.
pub(crate) struct Out<'a, T>(*mut T, core::marker::PhantomData<&'a mut T>);

impl<'a, T> Out<'a, T> {
    /// `ptr` as an output, or `TG_RESULT_NULL_ARGUMENT`.
    ///
    /// # Safety
    /// A non-NULL `ptr` is valid for a write of one `T` during `'a`.
    #[inline]
    pub(crate) unsafe fn new(ptr: *mut T) -> Result<Out<'a, T>, tg_result> {
        out_arg(ptr).map(|p| Out(p, core::marker::PhantomData))
    }

    /// Writes the answer (without dropping what was there: C's memory holds no Rust value).
    #[inline(always)]
    pub(crate) fn put(self, value: T) {
        // SAFETY: not NULL (checked by `new`) and valid for a write during `'a` (the contract
        // of `new`).
        unsafe { self.0.write(value) }
    }
}

/// An output pointer that is not NULL.
#[inline]
pub(crate) fn out_arg<T>(ptr: *mut T) -> Result<*mut T, tg_result> {
    if ptr.is_null() {
        Err(tg_result::NullArgument)
    } else {
        Ok(ptr)
    }
}

#[cfg(test)]
mod tests {
    use super::ascii;

    #[test]
    fn ascii_agrees_with_the_standard_check_at_every_length_and_position() {
        for len in 0..=40 {
            let clean = vec![b'a'; len];
            assert!(ascii(&clean), "{len}");
            for at in 0..len {
                let mut b = clean.clone();
                b[at] = 0xC3;
                assert_eq!(ascii(&b), b.is_ascii(), "{len} {at}");
                assert!(!ascii(&b), "{len} {at}");
            }
        }
    }
}
