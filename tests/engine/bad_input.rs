//! Every public constructor and parser fed empty, huge (1 MiB), non-UTF-8 (where the type
//! allows it) and boundary values: each bad input gets a clear error (naming what is wrong),
//! nothing panics, and nothing is half-changed (a refused reload leaves the profile and every
//! bucket as they were; a refused key charges nothing).

use tollgate_testkit as common;

use common::mock_limiter;
use tollgate::profile::Period;
use tollgate::{BuildError, Decision, Key, KeyError, Limiter, Profile, MAX_ID_LEN};

const MIB: usize = 1 << 20;

fn valid(capacity: &str, burst_tokens: &str, burst_per: &str) -> String {
    format!(
        "name: t\nidentities: {{ capacity: {capacity} }}\nroute_classes:\n  c:\n    \
         burst: {{ tokens: {burst_tokens}, per: {burst_per} }}\n    \
         sustained: {{ tokens: 10, per: 1h }}\n"
    )
}

/// Refused, with a message that mentions `needle` (case-insensitive).
fn refused(src: &str, needle: &str) {
    let e = Profile::from_yaml(src).expect_err(&src[..src.len().min(200)]);
    let m = e.to_string().to_lowercase();
    assert!(!e.message().is_empty());
    assert!(
        m.contains(&needle.to_lowercase()),
        "error for {:?} does not mention {needle:?}: {m}",
        &src[..src.len().min(200)]
    );
}

#[test]
fn profile_from_yaml_refuses_empty_huge_and_out_of_range() {
    refused("", "");
    refused("\0", "");
    refused(&"a".repeat(MIB), "");
    refused(&"#".repeat(MIB), "");
    // Deep nesting is refused on the parser's first events (the parser is quadratic in it),
    // with a position.
    refused(&"[".repeat(1 << 12), "nested more than 32 deep");
    refused(&"{a: ".repeat(1 << 12), "line 1 column 129");
    refused(&"a".repeat(5 << 20), "more than the 4194304 allowed");
    // A 1 MiB name is a string like any other; a 1 MiB comment after a valid profile is ignored.
    let long_name = format!("{}\n# {}\n", valid("8", "1", "1s"), "x".repeat(MIB));
    assert!(Profile::from_yaml(&long_name).is_ok());
    // Boundaries of each number.
    assert!(Profile::from_yaml(&valid("1", "1", "1ms")).is_ok());
    assert!(Profile::from_yaml(&valid("1073741824", "4294967295", "366d")).is_ok());
    refused(&valid("0", "1", "1s"), "capacity");
    refused(&valid("1073741825", "1", "1s"), "capacity");
    refused(&valid("-1", "1", "1s"), "capacity");
    refused(&valid("18446744073709551616", "1", "1s"), "capacity");
    refused(&valid("8", "0", "1s"), "tokens");
    refused(&valid("8", "4294967296", "1s"), "tokens");
    refused(&valid("8", "1.5", "1s"), "tokens");
    refused(&valid("8", "1", "0s"), "per");
    refused(&valid("8", "1", "367d"), "per");
    refused(&valid("8", "1", "1 s"), "per");
    refused(&valid("8", "1", "\"\""), "per");
    refused(&valid("8", "1", "1.5s"), "per");
    // Structure.
    refused(
        "name: t\nidentities: { capacity: 8 }\nroute_classes: {}\n",
        "route_classes",
    );
    refused(
        &format!("{}unknown_field: 1\n", valid("8", "1", "1s")),
        "unknown_field",
    );
    refused(
        &valid("8", "1", "1s").replace("name: t", "name: \"\""),
        "name",
    );
    let dup = format!(
        "{}  c:\n    burst: {{ tokens: 1, per: 1s }}\n    sustained: {{ tokens: 1, per: 1s }}\n",
        valid("8", "1", "1s")
    );
    refused(&dup, "c");
    let share = |s: &str| {
        format!(
            "{}shared_capacity: {{ shards: 1, window: 1s, slots_per_window: 10, tenant_share: {s} }}\n",
            valid("8", "1", "1s")
        )
    };
    assert!(Profile::from_yaml(&share("1")).is_ok());
    for bad in ["0", "-0.5", "1.0001", ".nan", ".inf"] {
        refused(&share(bad), "tenant_share");
    }
}

/// Regression (found here): parsing time grew with the square of the flow-nesting depth (the
/// YAML scanner, `unsafe-libyaml` under `serde_yaml_ng`, walks every open flow level for every
/// token): in a debug build 4 Ki nested `{a: ` took 0.35 s, 16 Ki 5.4 s, and a 1 MiB source of
/// them minutes, through `tg_limiter_new_from_yaml` and `tg_limiter_reload` too. Now
/// `Profile::from_yaml` refuses sources over 4 MiB, and nesting deeper than 32 as libyaml's
/// events show it (`tests/engine/profile_b4.rs` has the inputs that hid from a text scan).
/// The refusal comes at the 33rd level, so the scanner never walks the 16 Ki levels after it
/// (what that costs is the `profile_parse` bench's; no clock here).
#[test]
fn profile_from_yaml_refuses_deep_nesting_at_its_33rd_level() {
    let src = "{a: ".repeat(1 << 14); // 64 KiB
    let e = Profile::from_yaml(&src).unwrap_err();
    assert!(
        e.message().contains("collections nested more than 32 deep"),
        "{e}"
    );
    // The 33rd `{` is at column 4 * 32 + 1.
    assert_eq!((e.line(), e.column()), (Some(1), Some(129)), "{e}");
}

#[test]
fn profile_from_path_refuses_missing_empty_huge_and_non_utf8_files() {
    let dir = std::env::temp_dir().join(format!("tollgate-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let e = Profile::from_path(dir.join("missing.yaml")).unwrap_err();
    assert!(e.message().contains("missing.yaml"), "{e}");
    let e = Profile::from_path(&dir).unwrap_err();
    assert!(e.message().contains("cannot read"), "{e}");
    for (name, bytes) in [
        ("empty.yaml", Vec::new()),
        ("huge.yaml", vec![b'a'; MIB]),
        ("latin1.yaml", b"name: caf\xe9\n".to_vec()),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let e = Profile::from_path(&p).unwrap_err();
        assert!(e.message().contains(name), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn period_parse_refuses_everything_but_an_integer_and_a_unit() {
    assert_eq!(Period::parse("1ms").unwrap().as_nanos(), 1_000_000);
    assert_eq!(
        Period::parse("366d").unwrap().as_nanos(),
        tollgate::profile::MAX_PERIOD_NANOS
    );
    let huge_digits = format!("{}s", "9".repeat(MIB));
    let huge_zeros = format!("{}1s", "0".repeat(MIB));
    for bad in [
        "",
        "1",
        "s",
        "ms",
        "-1s",
        "+1s",
        "1.5s",
        "0ms",
        "0s",
        "367d",
        "8785h",
        " 1s",
        "1s ",
        "1S",
        "1sec",
        "1 s",
        "１s",
        "18446744073709551615ms",
        "18446744073709551616s",
        &huge_digits,
        "\u{0}",
    ] {
        let e = Period::parse(bad).expect_err(&bad[..bad.len().min(40)]);
        assert!(e.message().contains("invalid duration"), "{e}");
    }
    // Leading zeros are still an integer.
    assert_eq!(
        Period::parse(&huge_zeros).unwrap().as_nanos(),
        1_000_000_000
    );
}

#[test]
fn keys_refuse_empty_and_too_long_ids_and_charge_nothing() {
    let (limiter, _mock) = mock_limiter(common::profile(64, &[(1, 1_000, 10, 60_000)]));
    let c = limiter.route_class("c0").unwrap();
    let max = "x".repeat(MAX_ID_LEN);
    let over = "x".repeat(MAX_ID_LEN + 1);
    let huge = "x".repeat(MIB);
    assert_eq!(Key::authenticated("", "p", c), Err(KeyError::EmptyTenant));
    assert_eq!(
        Key::authenticated("t", "", c),
        Err(KeyError::EmptyPrincipal)
    );
    assert_eq!(Key::authenticated("", "", c), Err(KeyError::EmptyTenant));
    assert_eq!(Key::authenticated(&over, "p", c), Err(KeyError::TooLong));
    assert_eq!(Key::authenticated("t", &over, c), Err(KeyError::TooLong));
    assert_eq!(Key::authenticated(&huge, &huge, c), Err(KeyError::TooLong));
    for e in [
        KeyError::EmptyTenant,
        KeyError::EmptyPrincipal,
        KeyError::TooLong,
    ] {
        assert!(!e.to_string().is_empty());
    }
    // The longest ids are keys, and distinct ones.
    let a = Key::authenticated(&max, &max, c).unwrap();
    let b = Key::authenticated(&max, "p", c).unwrap();
    assert_eq!(limiter.admit(&a), Decision::Admit);
    assert_eq!(limiter.admit(&b), Decision::Admit);
    assert!(matches!(limiter.admit(&a), Decision::Throttle { .. }));
}

#[test]
fn key_secret_refuses_only_the_empty_secret() {
    let p = common::profile(8, &[(1, 1_000, 10, 60_000)]);
    assert_eq!(
        Limiter::builder(p.clone())
            .key_secret(b"")
            .build()
            .unwrap_err(),
        BuildError::EmptySecret
    );
    assert!(!BuildError::EmptySecret.to_string().is_empty());
    let huge = vec![0xffu8; MIB];
    assert!(Limiter::builder(p.clone())
        .key_secret(&huge)
        .build()
        .is_ok());
    assert!(Limiter::builder(p)
        .key_secret(b"\xff\x00\xfe")
        .build()
        .is_ok());
}

#[test]
fn refused_reloads_change_nothing() {
    let yaml = |capacity: u32, extra: &str| {
        format!(
            "name: t\nidentities: {{ capacity: {capacity} }}\nroute_classes:\n  a:\n    \
             burst: {{ tokens: 2, per: 1s }}\n    sustained: {{ tokens: 10, per: 1h }}\n{extra}"
        )
    };
    let b_class =
        "  b:\n    burst: { tokens: 9, per: 1s }\n    sustained: { tokens: 9, per: 1s }\n";
    let base = Profile::from_yaml(&yaml(64, b_class)).unwrap();
    let (limiter, _mock) = mock_limiter(base.clone());
    let a = limiter.route_class("a").unwrap();
    let key = Key::authenticated("t", "p", a).unwrap();
    assert_eq!(limiter.admit(&key), Decision::Admit);
    let before = (
        limiter.profile(),
        limiter.remaining(&key),
        limiter.published_limits(),
    );
    let refusals = [
        // Drops class b.
        (yaml(64, ""), "route_classes.b"),
        // Resizes the table.
        (yaml(65, b_class), "identities.capacity"),
        // Changes the anonymous prefixes.
        (
            yaml(
                64,
                &format!("{b_class}anonymous: {{ ipv4_prefix: 16, ipv6_prefix: 56 }}\n"),
            ),
            "anonymous",
        ),
    ];
    for (src, needle) in refusals {
        let e = limiter
            .reload(Profile::from_yaml(&src).unwrap())
            .unwrap_err();
        assert!(e.message().contains(needle), "{e}");
        let after = (
            limiter.profile(),
            limiter.remaining(&key),
            limiter.published_limits(),
        );
        assert_eq!(after, before);
        assert_eq!(*limiter.profile(), base);
    }
    // The state is the one from before: one token of two was spent.
    assert_eq!(limiter.admit(&key), Decision::Admit);
    assert!(matches!(limiter.admit(&key), Decision::Throttle { .. }));
}

#[test]
fn parse_retry_after_refuses_what_is_not_a_delay_or_a_date() {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    use tollgate_client::{parse_retry_after, MAX_RETRY_AFTER};
    let now = UNIX_EPOCH + Duration::from_secs(1_780_000_000);
    let huge_digits = "9".repeat(MIB);
    let huge_spaces = " ".repeat(MIB);
    let huge_zeros = format!("{}7", "0".repeat(MIB));
    assert_eq!(parse_retry_after(&huge_digits, now), Some(MAX_RETRY_AFTER));
    assert_eq!(
        parse_retry_after(&huge_zeros, now),
        Some(Duration::from_secs(7))
    );
    assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
    let garbage = "a".repeat(MIB);
    for bad in [
        "",
        " ",
        "\t",
        &huge_spaces,
        &garbage,
        "-1",
        "+1",
        "1.5",
        "1e3",
        "0x10",
        "１",
        "1 2",
        "Sun, 06 Nov 1994 08:49:37 GMT junk",
        "Sun, 31 Feb 1994 08:49:37 GMT",
        "Mon, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "\u{0}",
    ] {
        assert_eq!(
            parse_retry_after(bad, now),
            None,
            "{:?}",
            &bad[..bad.len().min(40)]
        );
    }
    // Any `now`, even before the epoch, is fine.
    let before_epoch = UNIX_EPOCH - Duration::from_secs(1 << 40);
    assert_eq!(
        parse_retry_after("5", before_epoch),
        Some(Duration::from_secs(5))
    );
    let _ = parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", SystemTime::UNIX_EPOCH);
}

mod ffi {
    use super::MIB;
    use std::os::raw::c_char;
    use tollgate_ffi::*;

    // One token an hour: the C ABI reads the real clock, and "the spent token is still spent"
    // must hold however slowly a loaded machine (or AddressSanitizer) runs the test.
    const YAML: &str = "name: f\nidentities: { capacity: 16 }\nroute_classes:\n  c:\n    burst: { tokens: 1, per: 1h }\n    sustained: { tokens: 10, per: 1h }\n";

    fn new() -> *mut tg_limiter {
        let mut l = core::ptr::null_mut();
        // SAFETY: valid buffer and out pointer.
        let r = unsafe { tg_limiter_new_from_yaml(YAML.as_ptr().cast(), YAML.len(), &mut l) };
        assert_eq!(r, tg_result::Ok);
        l
    }

    const SENTINEL: tg_decision = tg_decision {
        kind: tg_decision_kind::Unavailable,
        http_status: 1,
        bucket: tg_bucket_kind::None,
        cause: tg_cause::None,
        retry_after_ms: 1,
        code: core::ptr::null(),
    };

    fn admit(l: *const tg_limiter, t: &[u8], p: &[u8], class: u32) -> (tg_result, tg_decision) {
        let mut out = SENTINEL;
        // SAFETY: valid buffers and out pointer.
        let r = unsafe {
            tg_admit(
                l,
                t.as_ptr().cast(),
                t.len(),
                p.as_ptr().cast(),
                p.len(),
                class,
                &mut out,
            )
        };
        (r, out)
    }

    #[test]
    fn constructors_refuse_null_overlong_non_utf8_and_huge() {
        let huge = vec![b'a'; MIB];
        let mut out: *mut tg_limiter = core::ptr::null_mut();
        // SAFETY: every pointer is NULL or valid for its length; the overflowing lengths are
        // refused before anything is read.
        unsafe {
            assert_eq!(
                tg_limiter_new_from_yaml(core::ptr::null(), 0, &mut out),
                tg_result::NullArgument
            );
            assert_eq!(
                tg_limiter_new_from_yaml(YAML.as_ptr().cast(), YAML.len(), core::ptr::null_mut()),
                tg_result::NullArgument
            );
            assert_eq!(
                tg_limiter_new_from_yaml(YAML.as_ptr().cast(), usize::MAX, &mut out),
                tg_result::LengthOverflow
            );
            assert_eq!(
                tg_limiter_new_from_yaml(b"\xff\xfe".as_ptr().cast(), 2, &mut out),
                tg_result::InvalidUtf8
            );
            assert_eq!(
                tg_limiter_new_from_yaml(b"".as_ptr().cast(), 0, &mut out),
                tg_result::InvalidProfile
            );
            assert_eq!(
                tg_limiter_new_from_yaml(huge.as_ptr().cast(), huge.len(), &mut out),
                tg_result::InvalidProfile
            );
            let mut err: tg_profile_error = core::mem::zeroed();
            let bad = YAML.replace("tokens: 1,", "tokens: 0,");
            assert_eq!(
                tg_limiter_new_from_yaml_err(bad.as_ptr().cast(), bad.len(), &mut err, &mut out),
                tg_result::InvalidProfile
            );
            assert!(err.message_len > 0 && err.message_len < TG_PROFILE_ERROR_MESSAGE_CAPACITY);
            assert!(err.line > 0);
            // A message longer than the buffer: `message_len` is the whole length (as
            // documented) and `message` a truncated copy, NUL-terminated within the buffer.
            let long = format!("{}: 1\n", "k".repeat(MIB));
            assert_eq!(
                tg_limiter_new_from_yaml_err(long.as_ptr().cast(), long.len(), &mut err, &mut out),
                tg_result::InvalidProfile
            );
            assert!(err.message_len >= TG_PROFILE_ERROR_MESSAGE_CAPACITY);
            assert!(err.message.contains(&0));
            let text = std::ffi::CStr::from_ptr(err.message.as_ptr());
            assert!(text.to_str().is_ok(), "cut at a character boundary");
        }
        assert!(out.is_null(), "nothing written on failure");
    }

    #[test]
    fn admits_refuse_bad_arguments_and_charge_nothing() {
        let l = new();
        let over = vec![b'x'; TG_MAX_ID_LEN + 1];
        let huge = vec![b'x'; MIB];
        let cases: [(&[u8], &[u8], u32, tg_result); 7] = [
            (b"", b"p", 0, tg_result::EmptyKey),
            (b"t", b"", 0, tg_result::EmptyKey),
            (&over, b"p", 0, tg_result::KeyTooLong),
            (b"t", &huge, 0, tg_result::KeyTooLong),
            (b"\xff", b"p", 0, tg_result::InvalidUtf8),
            (b"t", b"p\xc3", 0, tg_result::InvalidUtf8),
            (b"t", b"p", 1, tg_result::UnknownRouteClass),
        ];
        for (t, p, class, want) in cases {
            let (r, out) = admit(l, t, p, class);
            assert_eq!(
                r,
                want,
                "{:?} {:?}",
                &t[..t.len().min(8)],
                &p[..p.len().min(8)]
            );
            assert_eq!(out, SENTINEL, "nothing written on failure");
        }
        // SAFETY: NULL limiter, NULL out, NULL ids, overflowing lengths: all refused unread.
        unsafe {
            let mut out = SENTINEL;
            assert_eq!(
                tg_admit(
                    core::ptr::null(),
                    b"t".as_ptr().cast(),
                    1,
                    b"p".as_ptr().cast(),
                    1,
                    0,
                    &mut out
                ),
                tg_result::NullArgument
            );
            assert_eq!(
                tg_admit(
                    l,
                    b"t".as_ptr().cast(),
                    1,
                    b"p".as_ptr().cast(),
                    1,
                    0,
                    core::ptr::null_mut()
                ),
                tg_result::NullArgument
            );
            assert_eq!(
                tg_admit(
                    l,
                    core::ptr::null(),
                    1,
                    b"p".as_ptr().cast(),
                    1,
                    0,
                    &mut out
                ),
                tg_result::NullArgument
            );
            assert_eq!(
                tg_admit(
                    l,
                    b"t".as_ptr().cast(),
                    usize::MAX,
                    b"p".as_ptr().cast(),
                    1,
                    0,
                    &mut out
                ),
                tg_result::LengthOverflow
            );
            for len in [0, 3, 5, 15, 17, MIB] {
                let ip = vec![1u8; len.max(1)];
                assert_eq!(
                    tg_admit_anonymous(l, ip.as_ptr(), len, 0, &mut out),
                    tg_result::InvalidIpLength
                );
            }
            assert_eq!(
                tg_admit_anonymous(l, core::ptr::null(), 4, 0, &mut out),
                tg_result::NullArgument
            );
            assert_eq!(
                tg_admit_anonymous(l, [1u8; 4].as_ptr(), 4, u32::MAX, &mut out),
                tg_result::UnknownRouteClass
            );
            assert_eq!(out, SENTINEL);
            let mut class = 99u32;
            assert_eq!(
                tg_route_class(l, b"".as_ptr().cast(), 0, &mut class),
                tg_result::UnknownRouteClass
            );
            assert_eq!(
                tg_route_class(l, huge.as_ptr().cast(), huge.len(), &mut class),
                tg_result::UnknownRouteClass
            );
            assert_eq!(
                tg_route_class(l, b"\xff".as_ptr().cast(), 1, &mut class),
                tg_result::InvalidUtf8
            );
            assert_eq!(class, 99);
        }
        // Refused admits charged nothing: the one token is still there.
        let (r, out) = admit(l, b"t", b"p", 0);
        assert_eq!((r, out.kind), (tg_result::Ok, tg_decision_kind::Admit));
        let (r, out) = admit(l, b"t", b"p", 0);
        assert_eq!(
            (r, out.kind, out.http_status),
            (tg_result::Ok, tg_decision_kind::Throttle, 429)
        );
        // SAFETY: the handle from `new`, freed once; NULL is a no-op.
        unsafe {
            tg_limiter_free(l);
            tg_limiter_free(core::ptr::null_mut());
        }
    }

    #[test]
    fn reload_and_error_message_refuse_bad_arguments() {
        let l = new();
        let (r, _) = admit(l, b"t", b"p", 0);
        assert_eq!(r, tg_result::Ok);
        let huge = vec![b'a'; MIB];
        let resized = YAML.replace("capacity: 16", "capacity: 17");
        // SAFETY: valid or NULL pointers; overflowing lengths refused unread.
        unsafe {
            assert_eq!(
                tg_limiter_reload(core::ptr::null_mut(), YAML.as_ptr().cast(), YAML.len()),
                tg_result::NullArgument
            );
            assert_eq!(
                tg_limiter_reload(l, core::ptr::null(), 0),
                tg_result::NullArgument
            );
            assert_eq!(
                tg_limiter_reload(l, YAML.as_ptr().cast(), usize::MAX),
                tg_result::LengthOverflow
            );
            assert_eq!(
                tg_limiter_reload(l, b"\xff".as_ptr().cast(), 1),
                tg_result::InvalidUtf8
            );
            assert_eq!(
                tg_limiter_reload(l, b"".as_ptr().cast(), 0),
                tg_result::InvalidProfile
            );
            assert_eq!(
                tg_limiter_reload(l, huge.as_ptr().cast(), huge.len()),
                tg_result::InvalidProfile
            );
            assert_eq!(
                tg_limiter_reload(l, resized.as_ptr().cast(), resized.len()),
                tg_result::ReloadRefused
            );
        }
        // Nothing changed: the spent token is still spent.
        let (r, out) = admit(l, b"t", b"p", 0);
        assert_eq!((r, out.kind), (tg_result::Ok, tg_decision_kind::Throttle));

        let mut buf = [0x55 as c_char; TG_ERROR_MESSAGE_CAPACITY];
        let mut n = 7usize;
        // SAFETY: `buf` holds the lengths given (or more); NULLs are refused.
        unsafe {
            assert_eq!(
                tg_error_message(7000, buf.as_mut_ptr(), 0, &mut n),
                tg_result::BufferTooSmall
            );
            assert_eq!(
                tg_error_message(7000, buf.as_mut_ptr(), 1, &mut n),
                tg_result::BufferTooSmall
            );
            assert_eq!(n, 7);
            assert_eq!(buf[0], 0x55, "nothing written on failure");
            assert_eq!(
                tg_error_message(7000, core::ptr::null_mut(), 10, &mut n),
                tg_result::NullArgument
            );
            assert_eq!(
                tg_error_message(7000, buf.as_mut_ptr(), buf.len(), core::ptr::null_mut()),
                tg_result::NullArgument
            );
            assert_eq!(
                tg_error_message(7000, buf.as_mut_ptr(), usize::MAX, &mut n),
                tg_result::LengthOverflow
            );
            for code in [0, 1, 6999, 7000, 7999, u32::MAX] {
                assert_eq!(
                    tg_error_message(code, buf.as_mut_ptr(), buf.len(), &mut n),
                    tg_result::Ok
                );
                assert!(n > 0 && n < buf.len() && buf[n] == 0);
            }
            tg_limiter_free(l);
        }
    }
}
