//! Result codes, their messages, the panic boundary and the version.

use super::*;
use crate::error_message::UNKNOWN_RESULT_MESSAGE;
use crate::panic::panic_boundary;
use crate::result::ALL_RESULTS;

#[test]
fn error_messages() {
    let mut buf = [0x55 as c_char; TG_ERROR_MESSAGE_CAPACITY];
    let mut n = usize::MAX;
    for r in ALL_RESULTS
        .iter()
        .map(|r| *r as u32)
        .chain([1, 6999, 7008, u32::MAX])
    {
        // SAFETY: 1. `buf` is valid for its length; `n` is a valid place.
        let res = unsafe { tg_error_message(r, buf.as_mut_ptr(), buf.len(), &mut n) };
        assert_eq!(res, tg_result::Ok);
        // SAFETY: 1. The message was written with its NUL, inside `buf`.
        let m = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
        assert_eq!(m.len(), n);
        match tg_result::from_u32(r) {
            Some(code) => assert_eq!(m, code.message()),
            None => assert_eq!(m, UNKNOWN_RESULT_MESSAGE),
        }
    }
    // Too small by one: nothing written. Exactly enough: written.
    let code = tg_result::EmptyKey;
    let need = code.message().len() + 1;
    let mut small = [0x55 as c_char; 64];
    let mut n = usize::MAX;
    // SAFETY: 1. `small` is valid for `need - 1 <= 64` bytes; `n` is a valid place.
    let r = unsafe { tg_error_message(code as u32, small.as_mut_ptr(), need - 1, &mut n) };
    assert_eq!((r, n), (tg_result::BufferTooSmall, usize::MAX));
    assert!(small.iter().all(|b| *b == 0x55));
    // SAFETY: as above, with `need` bytes.
    let r = unsafe { tg_error_message(code as u32, small.as_mut_ptr(), need, &mut n) };
    assert_eq!((r, n), (tg_result::Ok, need - 1));
    assert_eq!(small[need - 1], 0);
    assert_eq!(small[need], 0x55);
    // SAFETY: 1. NULL `buf` or `out_n` are checked; the other is valid.
    unsafe {
        assert_eq!(
            tg_error_message(0, null_mut(), 64, &mut n),
            tg_result::NullArgument
        );
        assert_eq!(
            tg_error_message(0, small.as_mut_ptr(), 64, null_mut()),
            tg_result::NullArgument
        );
        assert_eq!(
            tg_error_message(0, small.as_mut_ptr(), usize::MAX, &mut n),
            tg_result::LengthOverflow
        );
        assert_eq!(
            tg_error_message(0, small.as_mut_ptr(), 0, &mut n),
            tg_result::BufferTooSmall
        );
    }
}

#[test]
fn result_codes_are_stable() {
    // These numbers are ABI: never change one, only add new ones.
    let expected: [(tg_result, u32); 14] = [
        (tg_result::Ok, 0),
        (tg_result::NullArgument, 7000),
        (tg_result::LengthOverflow, 7001),
        (tg_result::InvalidUtf8, 7002),
        (tg_result::EmptyKey, 7003),
        (tg_result::KeyTooLong, 7004),
        (tg_result::InvalidIpLength, 7005),
        (tg_result::BufferTooSmall, 7006),
        (tg_result::ForeignPin, 7007),
        (tg_result::UnknownRouteClass, 7100),
        (tg_result::InvalidProfile, 7200),
        (tg_result::ReloadRefused, 7201),
        (tg_result::OutOfMemory, 7300),
        (tg_result::Panic, 7900),
    ];
    assert_eq!(ALL_RESULTS.len(), expected.len());
    for (r, v) in expected {
        assert_eq!(r as u32, v);
        assert_eq!(tg_result::from_u32(v), Some(r));
        assert_eq!(u32::from(r), v);
        assert_eq!(tg_result::try_from(v), Ok(r));
        assert!(r.message().len() < TG_ERROR_MESSAGE_CAPACITY);
    }
    assert!(UNKNOWN_RESULT_MESSAGE.len() < TG_ERROR_MESSAGE_CAPACITY);
    assert_eq!(tg_result::from_u32(1), None);
    assert_eq!(tg_result::try_from(7008), Err(7008));
}

#[test]
fn panics_stop_at_the_boundary() {
    fn boom(fail: bool) -> tg_result {
        panic_boundary(|| {
            if fail {
                panic!("a bug");
            }
            Err(tg_result::EmptyKey)
        })
    }
    assert_eq!(boom(true), tg_result::Panic);
    assert_eq!(boom(false), tg_result::EmptyKey);
    let ok: tg_result = panic_boundary(|| Ok(()));
    assert_eq!(ok, tg_result::Ok);
    let s: *const c_char = panic_boundary(|| panic!("a bug"));
    assert!(s.is_null());
    let s: *const c_char = panic_boundary(|| c"x".as_ptr());
    assert!(!s.is_null());
    let mut ran = false;
    panic_boundary::<()>(|| ran = true);
    assert!(ran);
    panic_boundary::<()>(|| panic!("a bug"));
}

#[test]
fn version_is_static() {
    let v = tg_version();
    // SAFETY: 1. `tg_version` returns a static NUL-terminated string.
    assert_eq!(
        unsafe { CStr::from_ptr(v) }.to_str().unwrap(),
        env!("CARGO_PKG_VERSION")
    );
}
