//! Admitting through `tg_admit` and `tg_admit_anonymous`, and the decision C reads.

use core::time::Duration;
use std::net::Ipv6Addr;

use super::*;
use crate::decision::millis_up;

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

/// The usual ids are checked a word at a time, others a byte at a time: both agree with UTF-8
/// at every length and every position of an offending byte, for either id. About 400 tenants
/// are admitted, so the tenants' table (a sixteenth of `capacity`) gets 4,096 entries: ten in
/// a hundred used, far from filling a 64-entry probe window.
#[test]
fn ids_are_checked_as_utf8_at_every_length_and_byte_position() {
    let l = new("\
name: ids
identities: { capacity: 65536 }
route_classes:
  read: { burst: { tokens: 100, per: 1s }, sustained: { tokens: 100, per: 1s } }
")
    .unwrap_or_else(|(r, e)| panic!("{r:?}: {}", message(&e)));
    let kind = |t: &[u8], p: &[u8]| admit(&l, t, p, 0).map(|d| d.kind);
    for len in (1..=24).chain([TG_MAX_ID_LEN - 1, TG_MAX_ID_LEN]) {
        let clean = vec![b'a'; len];
        assert_eq!(kind(&clean, &clean), Ok(tg_decision_kind::Admit), "{len}");
        for at in (0..len).filter(|&at| at < 24 || len - at <= 24) {
            let mut bad = clean.clone();
            bad[at] = 0xff;
            assert_eq!(
                kind(&bad, &clean),
                Err(tg_result::InvalidUtf8),
                "{len} {at}"
            );
            assert_eq!(
                kind(&clean, &bad),
                Err(tg_result::InvalidUtf8),
                "{len} {at}"
            );
            if at + 2 <= len {
                let mut accented = clean.clone();
                accented[at..at + 2].copy_from_slice("é".as_bytes());
                let admitted = Ok(tg_decision_kind::Admit);
                assert_eq!(kind(&accented, &clean), admitted, "{len} {at}");
                assert_eq!(kind(&clean, &accented), admitted, "{len} {at}");
            }
        }
    }
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
fn retry_after_is_rounded_up_to_whole_milliseconds() {
    assert_eq!(millis_up(Duration::ZERO), 0);
    assert_eq!(millis_up(Duration::from_nanos(1)), 1);
    assert_eq!(millis_up(Duration::from_millis(1)), 1);
    assert_eq!(millis_up(Duration::from_nanos(1_000_001)), 2);
    assert_eq!(millis_up(Duration::from_secs(3600)), 3_600_000);
    assert_eq!(millis_up(Duration::MAX), TG_RETRY_AFTER_NONE - 1);
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
