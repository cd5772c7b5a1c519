//! Invalid profiles and their `tg_profile_error`, and reloads.

use core::ptr::null;

use super::*;
use crate::cast::borrow;

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
    // State is kept as tokens owed: alice owes the 2 she took, so 3 of the new 5 are left, and
    // then she waits for the new rate (a token per 200 ms); a fresh caller gets the new 5.
    for _ in 0..3 {
        let alice = admit(&l, b"acme", b"alice", write).unwrap();
        assert_eq!(alice.kind, tg_decision_kind::Admit);
    }
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
    let handle = unsafe { borrow(l.0) }.unwrap();
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
