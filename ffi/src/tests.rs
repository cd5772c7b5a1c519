//! The extern functions called from Rust, with the pointers and lengths C could pass.

use super::*;
use core::ptr::{null, null_mut};

const PROFILE: &str = "\
name: ffi
identities: { capacity: 256 }
route_classes:
  write:
    burst:     { tokens: 2,  per: 1s }
    sustained: { tokens: 100, per: 1h }
  read:
    burst:     { tokens: 50, per: 1s }
    sustained: { tokens: 6000, per: 1h }
catalog:
  throttled: { code: slow_down }
";

/// A limiter that is freed when the test ends.
struct Owned(*mut tg_limiter);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: 1. The pointer came from `tg_limiter_new_from_yaml` and is freed only here.
        unsafe { tg_limiter_free(self.0) }
    }
}

fn new(yaml: &str) -> Result<Owned, (tg_result, Box<tg_profile_error>)> {
    let mut out = null_mut();
    let mut err = tg_profile_error::from_detail(&Detail::from(tg_result::Ok));
    // SAFETY: 1. `yaml` is valid for its length. 2. `err` and `out` are valid places.
    match unsafe {
        tg_limiter_new_from_yaml_err(yaml.as_ptr().cast(), yaml.len(), &mut err, &mut out)
    } {
        tg_result::Ok => {
            assert!(!out.is_null());
            Ok(Owned(out))
        }
        r => {
            assert!(out.is_null(), "nothing is written to `out` on failure");
            Err((r, Box::new(err)))
        }
    }
}

fn limiter() -> Owned {
    new(PROFILE).unwrap_or_else(|(r, e)| panic!("{r:?}: {}", message(&e)))
}

fn message(e: &tg_profile_error) -> String {
    // SAFETY: 1. `message` is NUL-terminated within its array (`from_detail` writes at most
    // capacity - 1 bytes into a zeroed array).
    unsafe { CStr::from_ptr(e.message.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned()
}

fn class(l: &Owned, name: &str) -> Result<u32, tg_result> {
    let mut out = u32::MAX;
    // SAFETY: 1. `l.0` is live. 2. `name` is valid for its length. 3. `out` is a valid place.
    match unsafe { tg_route_class(l.0, name.as_ptr().cast(), name.len(), &mut out) } {
        tg_result::Ok => Ok(out),
        r => {
            assert_eq!(out, u32::MAX, "nothing is written on failure");
            Err(r)
        }
    }
}

/// A decision that no call produces, to see that failures leave `out` alone.
fn sentinel() -> tg_decision {
    tg_decision {
        kind: tg_decision_kind::Unavailable,
        http_status: 1,
        bucket: tg_bucket_kind::Sustained,
        cause: tg_cause::StoreUnavailable,
        retry_after_ms: 7,
        code: c"sentinel".as_ptr(),
    }
}

fn admit(l: &Owned, tenant: &[u8], principal: &[u8], class: u32) -> Result<tg_decision, tg_result> {
    let mut out = sentinel();
    // SAFETY: 1. `l.0` is live. 2. Both slices are valid for their lengths. 3. `out` is a valid
    // place.
    let r = unsafe {
        tg_admit(
            l.0,
            tenant.as_ptr().cast(),
            tenant.len(),
            principal.as_ptr().cast(),
            principal.len(),
            class,
            &mut out,
        )
    };
    match r {
        tg_result::Ok => Ok(out),
        r => {
            assert_eq!(out, sentinel(), "nothing is written on failure");
            Err(r)
        }
    }
}

fn admit_anonymous(l: &Owned, ip: &[u8], class: u32) -> Result<tg_decision, tg_result> {
    let mut out = sentinel();
    // SAFETY: 1. `l.0` is live. 2. `ip` is valid for its length. 3. `out` is a valid place.
    match unsafe { tg_admit_anonymous(l.0, ip.as_ptr(), ip.len(), class, &mut out) } {
        tg_result::Ok => Ok(out),
        r => {
            assert_eq!(out, sentinel(), "nothing is written on failure");
            Err(r)
        }
    }
}

fn code(d: &tg_decision) -> &str {
    assert!(!d.code.is_null());
    // SAFETY: 1. `code` is NUL-terminated and lives as long as the limiter, which outlives `d`'s
    // use here.
    unsafe { CStr::from_ptr(d.code) }.to_str().unwrap()
}

#[test]
fn admits_then_throttles_with_the_profile_code() {
    let l = limiter();
    let write = class(&l, "write").unwrap();
    assert_eq!(write, 0);
    assert_eq!(class(&l, "read"), Ok(1));
    for _ in 0..2 {
        let d = admit(&l, b"acme", b"alice", write).unwrap();
        assert_eq!(d.kind, tg_decision_kind::Admit);
        assert_eq!(d.http_status, 200);
        assert_eq!(d.retry_after_ms, TG_RETRY_AFTER_NONE);
        assert_eq!((d.bucket, d.cause), (tg_bucket_kind::None, tg_cause::None));
        assert_eq!(code(&d), "");
    }
    let d = admit(&l, b"acme", b"alice", write).unwrap();
    assert_eq!(d.kind, tg_decision_kind::Throttle);
    assert_eq!(d.http_status, 429);
    assert_eq!(d.bucket, tg_bucket_kind::Burst);
    assert_eq!(d.cause, tg_cause::None);
    assert!(
        (1..=500).contains(&d.retry_after_ms),
        "{}",
        d.retry_after_ms
    );
    assert_eq!(code(&d), "slow_down");
    // Another principal, and another class, have their own buckets.
    assert_eq!(
        admit(&l, b"acme", b"bob", write).unwrap().kind,
        tg_decision_kind::Admit
    );
    assert_eq!(
        admit(&l, b"acme", b"alice", 1).unwrap().kind,
        tg_decision_kind::Admit
    );
}

#[test]
fn key_arguments_are_checked() {
    let l = limiter();
    let long = vec![b'x'; TG_MAX_ID_LEN + 1];
    assert_eq!(admit(&l, b"", b"alice", 0), Err(tg_result::EmptyKey));
    assert_eq!(admit(&l, b"acme", b"", 0), Err(tg_result::EmptyKey));
    assert_eq!(admit(&l, &long, b"alice", 0), Err(tg_result::KeyTooLong));
    assert_eq!(admit(&l, b"acme", &long, 0), Err(tg_result::KeyTooLong));
    assert!(admit(&l, &long[..TG_MAX_ID_LEN], b"alice", 0).is_ok());
    assert_eq!(
        admit(&l, b"ac\xffme", b"alice", 0),
        Err(tg_result::InvalidUtf8)
    );
    assert_eq!(admit(&l, b"acme", b"\xc3", 0), Err(tg_result::InvalidUtf8));
    assert_eq!(
        admit(&l, b"acme", b"alice", 2),
        Err(tg_result::UnknownRouteClass)
    );
    assert_eq!(
        admit(&l, b"acme", b"alice", u32::MAX),
        Err(tg_result::UnknownRouteClass)
    );
    assert_eq!(
        admit(&l, "zoë".as_bytes(), "ünïcode".as_bytes(), 0)
            .unwrap()
            .kind,
        tg_decision_kind::Admit
    );
}

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
        super::tests::class(&l, "wr\u{fffd}"),
        Err(tg_result::UnknownRouteClass)
    );
    assert_eq!(
        super::tests::class(&l, ""),
        Err(tg_result::UnknownRouteClass)
    );
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

#[test]
fn anonymous_callers_share_their_network_bucket() {
    let l = limiter();
    let v4 = [192u8, 0, 2, 1];
    let neighbour = [192u8, 0, 2, 200];
    let mut mapped = [0u8; 16];
    mapped[10] = 0xff;
    mapped[11] = 0xff;
    mapped[12..].copy_from_slice(&[192, 0, 2, 7]);
    assert_eq!(
        admit_anonymous(&l, &v4, 0).unwrap().kind,
        tg_decision_kind::Admit
    );
    assert_eq!(
        admit_anonymous(&l, &mapped, 0).unwrap().kind,
        tg_decision_kind::Admit
    );
    let d = admit_anonymous(&l, &neighbour, 0).unwrap();
    assert_eq!((d.kind, d.http_status), (tg_decision_kind::Throttle, 429));
    assert_eq!(code(&d), "slow_down");
    let v6: [u8; 16] = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets();
    assert_eq!(
        admit_anonymous(&l, &v6, 0).unwrap().kind,
        tg_decision_kind::Admit
    );
    for len in [0, 3, 5, 15, 17] {
        let buf = [1u8; 17];
        assert_eq!(
            admit_anonymous(&l, &buf[..len], 0),
            Err(tg_result::InvalidIpLength)
        );
    }
    assert_eq!(
        admit_anonymous(&l, &v4, 9),
        Err(tg_result::UnknownRouteClass)
    );
}

#[test]
fn invalid_profiles_say_where() {
    let (r, e) = new("name: x\nidentities: { capacity: 256 }\nroute_classes:\n  w:\n    burst: { tokens: 2, per: 1x }\n    sustained: { tokens: 9, per: 1h }\n")
        .err()
        .unwrap();
    assert_eq!(r, tg_result::InvalidProfile);
    let msg = message(&e);
    assert!(msg.contains("route_classes.w.burst.per"), "{msg}");
    assert_eq!(e.message_len, msg.len());
    assert_eq!(e.line, 5, "{msg}");
    assert!(e.column > 0);
    let (r, e) = new("name: [").err().unwrap();
    assert_eq!(r, tg_result::InvalidProfile);
    assert!(e.line >= 1);
    // Without `_err`, only the code.
    let mut out = null_mut();
    // SAFETY: 1. The string is valid for its length; `out` is a valid place.
    let r = unsafe { tg_limiter_new_from_yaml(c"name: [".as_ptr(), 7, &mut out) };
    assert_eq!((r, out), (tg_result::InvalidProfile, null_mut()));
    // A failure that is not the profile's own still fills `err`, with the code's message.
    let mut err = tg_profile_error::from_detail(&Detail::from(tg_result::Ok));
    // SAFETY: 1. `yaml` is NULL, which is checked; `err` is a valid place; `out` is NULL.
    let r = unsafe { tg_limiter_new_from_yaml_err(null(), 0, &mut err, null_mut()) };
    assert_eq!(r, tg_result::NullArgument);
    assert_eq!(message(&err), tg_result::NullArgument.message());
    assert_eq!((err.line, err.column), (0, 0));
}

#[test]
fn long_profile_messages_are_cut_at_a_character() {
    let long = "é".repeat(TG_PROFILE_ERROR_MESSAGE_CAPACITY);
    let e = tg_profile_error::from_detail(&Detail {
        code: tg_result::InvalidProfile,
        message: long.clone(),
        line: Some(usize::MAX),
        column: Some(3),
    });
    let m = message(&e);
    assert_eq!(e.message_len, long.len());
    assert_eq!(m.len(), TG_PROFILE_ERROR_MESSAGE_CAPACITY - 2);
    assert!(long.starts_with(&m));
    assert_eq!((e.line, e.column), (u32::MAX, 3));
}

#[test]
fn error_messages() {
    let mut buf = [0x55 as c_char; TG_ERROR_MESSAGE_CAPACITY];
    let mut n = usize::MAX;
    for r in ALL_RESULTS
        .iter()
        .map(|r| *r as u32)
        .chain([1, 6999, 7007, u32::MAX])
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
    let expected: [(tg_result, u32); 13] = [
        (tg_result::Ok, 0),
        (tg_result::NullArgument, 7000),
        (tg_result::LengthOverflow, 7001),
        (tg_result::InvalidUtf8, 7002),
        (tg_result::EmptyKey, 7003),
        (tg_result::KeyTooLong, 7004),
        (tg_result::InvalidIpLength, 7005),
        (tg_result::BufferTooSmall, 7006),
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
        assert!(r.message().len() < TG_ERROR_MESSAGE_CAPACITY);
    }
    assert!(UNKNOWN_RESULT_MESSAGE.len() < TG_ERROR_MESSAGE_CAPACITY);
    assert_eq!(tg_result::from_u32(1), None);
}

#[test]
fn retry_after_is_rounded_up_to_whole_milliseconds() {
    assert_eq!(millis_up(Duration::ZERO), 0);
    assert_eq!(millis_up(Duration::from_nanos(1)), 1);
    assert_eq!(millis_up(Duration::from_millis(1)), 1);
    assert_eq!(millis_up(Duration::from_nanos(1_000_001)), 2);
    assert_eq!(millis_up(Duration::from_secs(3600)), 3_600_000);
    assert_eq!(millis_up(Duration::MAX), TG_RETRY_AFTER_NONE - 1);
}

#[test]
fn panics_stop_at_the_boundary() {
    fn boom(fail: bool) -> tg_result {
        ffi_panic_boundary! {
            if fail {
                panic!("a bug");
            }
            Err(tg_result::EmptyKey)
        }
    }
    assert_eq!(boom(true), tg_result::Panic);
    assert_eq!(boom(false), tg_result::EmptyKey);
    let v: u8 = ffi_panic_boundary! { on_panic = 7; panic!("a bug") };
    assert_eq!(v, 7);
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

#[test]
#[cfg(target_pointer_width = "64")]
fn decision_layout_is_what_bindings_assume() {
    // `examples/python/tollgate_ctypes.py` and other hand-written bindings mirror this.
    assert_eq!(core::mem::offset_of!(tg_decision, kind), 0);
    assert_eq!(core::mem::offset_of!(tg_decision, http_status), 4);
    assert_eq!(core::mem::offset_of!(tg_decision, bucket), 8);
    assert_eq!(core::mem::offset_of!(tg_decision, cause), 12);
    assert_eq!(core::mem::offset_of!(tg_decision, retry_after_ms), 16);
    assert_eq!(core::mem::offset_of!(tg_decision, code), 24);
    assert_eq!(core::mem::size_of::<tg_result>(), 4);
    assert_eq!(core::mem::size_of::<tg_decision_kind>(), 4);
}

fn reload(l: &Owned, yaml: &str) -> Result<(), (tg_result, String)> {
    let mut err = tg_profile_error::from_detail(&Detail::from(tg_result::Ok));
    // SAFETY: 1. `l.0` is live. 2. `yaml` is valid for its length. 3. `err` is a valid place.
    match unsafe { tg_limiter_reload_err(l.0, yaml.as_ptr().cast(), yaml.len(), &mut err) } {
        tg_result::Ok => Ok(()),
        r => Err((r, message(&err))),
    }
}

#[test]
fn reload_keeps_state_and_class_numbers_and_old_codes() {
    let l = limiter();
    let write = class(&l, "write").unwrap();
    for _ in 0..2 {
        assert_eq!(
            admit(&l, b"acme", b"alice", write).unwrap().kind,
            tg_decision_kind::Admit
        );
    }
    let before = admit(&l, b"acme", b"alice", write).unwrap();
    assert_eq!(code(&before), "slow_down");

    // Classes reordered, one added, burst raised to 5, another throttle code.
    let next = "\
name: ffi
identities: { capacity: 256 }
route_classes:
  search:
    burst:     { tokens: 1, per: 1s }
    sustained: { tokens: 10, per: 1h }
  read:
    burst:     { tokens: 50, per: 1s }
    sustained: { tokens: 6000, per: 1h }
  write:
    burst:     { tokens: 5,  per: 1s }
    sustained: { tokens: 100, per: 1h }
catalog:
  throttled: { code: try_later }
";
    reload(&l, next).unwrap();
    assert_eq!(class(&l, "write"), Ok(write));
    assert_eq!(class(&l, "read"), Ok(1));
    let search = class(&l, "search").unwrap();
    assert_eq!(search, 2, "a new class gets the next number");
    // State is kept as time to refill: alice's burst is still empty, but refills at the new
    // rate (a token per 200 ms); a fresh caller gets the new burst of 5.
    let alice = admit(&l, b"acme", b"alice", write).unwrap();
    assert_eq!(alice.kind, tg_decision_kind::Throttle);
    assert!(
        (1..=200).contains(&alice.retry_after_ms),
        "{}",
        alice.retry_after_ms
    );
    let admitted = (0..6)
        .map(|_| admit(&l, b"acme", b"bob", write).unwrap())
        .filter(|d| d.kind == tg_decision_kind::Admit)
        .count();
    assert_eq!(admitted, 5);
    let after = admit(&l, b"acme", b"alice", write).unwrap();
    assert_eq!(code(&after), "try_later");
    assert_eq!(code(&before), "slow_down", "old code pointers stay valid");
    assert_eq!(
        admit(&l, b"acme", b"alice", search).unwrap().kind,
        tg_decision_kind::Admit
    );
    assert_eq!(
        admit(&l, b"acme", b"alice", search).unwrap().kind,
        tg_decision_kind::Throttle
    );
    assert_eq!(
        admit(&l, b"acme", b"alice", 3),
        Err(tg_result::UnknownRouteClass)
    );

    // Reloading the same catalogs again interns nothing new.
    // SAFETY: 1. `l.0` is live and only shared here.
    let handle = unsafe { tg_limiter::borrow(l.0) }.unwrap();
    let interned = handle.interned.lock().unwrap().len();
    reload(&l, &next.replace("try_later", "slow_down")).unwrap();
    reload(&l, next).unwrap();
    assert_eq!(handle.interned.lock().unwrap().len(), interned);
}

#[test]
fn reload_refusals_leave_the_profile_in_force() {
    let l = limiter();
    let without_read = "name: ffi\nidentities: { capacity: 256 }\nroute_classes:\n  write:\n    burst: { tokens: 2, per: 1s }\n    sustained: { tokens: 100, per: 1h }\n";
    let (r, msg) = reload(&l, without_read).unwrap_err();
    assert_eq!(r, tg_result::ReloadRefused);
    assert!(msg.contains("route_classes.read"), "{msg}");
    let bigger = PROFILE.replace("capacity: 256", "capacity: 512");
    let (r, msg) = reload(&l, &bigger).unwrap_err();
    assert_eq!(r, tg_result::ReloadRefused);
    assert!(msg.contains("identities.capacity"), "{msg}");
    let prefixes = format!("{PROFILE}anonymous: {{ ipv4_prefix: 16, ipv6_prefix: 48 }}\n");
    assert_eq!(
        reload(&l, &prefixes).unwrap_err().0,
        tg_result::ReloadRefused
    );
    let (r, msg) = reload(&l, "name: [").unwrap_err();
    assert_eq!(r, tg_result::InvalidProfile);
    assert!(!msg.is_empty());
    // Still the first profile: read is there, and the throttle code is the old one.
    assert_eq!(class(&l, "read"), Ok(1));
    for _ in 0..2 {
        admit(&l, b"t", b"p", 0).unwrap();
    }
    assert_eq!(code(&admit(&l, b"t", b"p", 0).unwrap()), "slow_down");
}
