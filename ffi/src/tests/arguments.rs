//! NULL pointers and lengths above `PTRDIFF_MAX`: codes, never a crash, nothing written.

use core::ptr::null;

use super::*;

#[test]
fn null_pointers_and_huge_lengths_are_codes() {
    let l = limiter();
    let mut out = sentinel();
    let t = b"acme".as_ptr().cast::<c_char>();
    // Never read: the length is refused first. Dangling but not NULL, as C could pass.
    let dangling = core::ptr::NonNull::<c_char>::dangling()
        .as_ptr()
        .cast_const();
    let cases: [(
        *const tg_limiter,
        *const c_char,
        usize,
        *const c_char,
        usize,
        tg_result,
    ); 7] = [
        (null(), t, 4, t, 4, tg_result::NullArgument),
        (l.0, null(), 0, t, 4, tg_result::NullArgument),
        (l.0, null(), 4, t, 4, tg_result::NullArgument),
        (l.0, t, 4, null(), 0, tg_result::NullArgument),
        (
            l.0,
            dangling,
            isize::MAX as usize + 1,
            t,
            4,
            tg_result::LengthOverflow,
        ),
        (l.0, t, 4, dangling, usize::MAX, tg_result::LengthOverflow),
        (l.0, dangling, 0, t, 4, tg_result::EmptyKey),
    ];
    for (lim, tp, tl, pp, pl, want) in cases {
        // SAFETY: 1. Every pointer is NULL, valid for its length, dangling with a length that
        // is refused before any read, or dangling with length 0 (a valid empty slice).
        let r = unsafe { tg_admit(lim, tp, tl, pp, pl, 0, &mut out) };
        assert_eq!(r, want);
        assert_eq!(out, sentinel());
    }
    // A NULL `out` is refused before anything is charged: the burst of 2 is still whole.
    for _ in 0..3 {
        // SAFETY: 1. `l.0` is live; the strings are valid; `out` is NULL, which is checked.
        let r = unsafe { tg_admit(l.0, t, 4, t, 4, 0, null_mut()) };
        assert_eq!(r, tg_result::NullArgument);
    }
    assert_eq!(
        admit(&l, b"acme", b"acme", 0).unwrap().kind,
        tg_decision_kind::Admit
    );
    assert_eq!(
        admit(&l, b"acme", b"acme", 0).unwrap().kind,
        tg_decision_kind::Admit
    );

    let ip = [192u8, 0, 2, 1];
    // SAFETY: 1. Each call passes NULL for the pointer under test and valid ones otherwise.
    unsafe {
        assert_eq!(
            tg_admit_anonymous(null(), ip.as_ptr(), 4, 0, &mut out),
            tg_result::NullArgument
        );
        assert_eq!(
            tg_admit_anonymous(l.0, null(), 4, 0, &mut out),
            tg_result::NullArgument
        );
        assert_eq!(
            tg_admit_anonymous(l.0, null(), 0, 0, &mut out),
            tg_result::NullArgument
        );
        assert_eq!(
            tg_admit_anonymous(l.0, ip.as_ptr(), 4, 0, null_mut()),
            tg_result::NullArgument
        );
    }
    assert_eq!(out, sentinel());

    let mut class = u32::MAX;
    // SAFETY: 1. As above, for `tg_route_class`.
    unsafe {
        assert_eq!(
            tg_route_class(null(), t, 4, &mut class),
            tg_result::NullArgument
        );
        assert_eq!(
            tg_route_class(l.0, null(), 0, &mut class),
            tg_result::NullArgument
        );
        assert_eq!(
            tg_route_class(l.0, dangling, usize::MAX, &mut class),
            tg_result::LengthOverflow
        );
        assert_eq!(
            tg_route_class(l.0, c"write".as_ptr(), 5, null_mut()),
            tg_result::NullArgument
        );
    }
    assert_eq!(class, u32::MAX);
    assert_eq!(
        super::class(&l, "wr\u{fffd}"),
        Err(tg_result::UnknownRouteClass)
    );
    assert_eq!(super::class(&l, ""), Err(tg_result::UnknownRouteClass));
    let mut class = u32::MAX;
    // SAFETY: 1. Two valid bytes that are not UTF-8.
    let r = unsafe { tg_route_class(l.0, b"\xff\xfe".as_ptr().cast(), 2, &mut class) };
    assert_eq!((r, class), (tg_result::InvalidUtf8, u32::MAX));

    let mut handle = null_mut();
    // SAFETY: 1. As above, for `tg_limiter_new_from_yaml`.
    unsafe {
        assert_eq!(
            tg_limiter_new_from_yaml(null(), 0, &mut handle),
            tg_result::NullArgument
        );
        let y = PROFILE.as_ptr().cast::<c_char>();
        assert_eq!(
            tg_limiter_new_from_yaml(y, PROFILE.len(), null_mut()),
            tg_result::NullArgument
        );
        assert_eq!(
            tg_limiter_new_from_yaml(dangling, usize::MAX, &mut handle),
            tg_result::LengthOverflow
        );
        assert_eq!(
            tg_limiter_new_from_yaml(b"\xff".as_ptr().cast(), 1, &mut handle),
            tg_result::InvalidUtf8
        );
        assert_eq!(
            tg_limiter_reload(null_mut(), y, PROFILE.len()),
            tg_result::NullArgument
        );
        assert_eq!(tg_limiter_reload(l.0, null(), 0), tg_result::NullArgument);
        assert_eq!(
            tg_limiter_reload(l.0, dangling, usize::MAX),
            tg_result::LengthOverflow
        );
        // NULL is a no-op.
        tg_limiter_free(null_mut());
    }
    assert!(handle.is_null());
}
