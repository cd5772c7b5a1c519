//! Pinned callers through `tg_pin`, `tg_pin_anonymous`, `tg_admit_pinned` and `tg_pinned_free`.

use core::ptr::{null, null_mut};

use super::*;

/// A pin freed when the test ends.
struct Pin(*mut tg_pinned);

impl Drop for Pin {
    fn drop(&mut self) {
        // SAFETY: 1. The pointer came from `tg_pin` or `tg_pin_anonymous` and is freed only here.
        unsafe { tg_pinned_free(self.0) }
    }
}

fn pin(l: &Owned, tenant: &[u8], principal: &[u8], class: u32) -> Result<Pin, tg_result> {
    let mut out = null_mut();
    // SAFETY: 1. `l.0` is live. 2. The slices are valid for their lengths. 3. `out` is valid.
    let r = unsafe {
        tg_pin(
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
        tg_result::Ok => Ok(Pin(out)),
        r => {
            assert!(out.is_null(), "nothing is written on failure");
            Err(r)
        }
    }
}

fn admit_pinned(l: *const tg_limiter, p: *const tg_pinned) -> Result<tg_decision, tg_result> {
    let mut d = sentinel();
    // SAFETY: 1. `l` and `p` are NULL or live. 2. `d` is a valid place.
    match unsafe { tg_admit_pinned(l, p, &mut d) } {
        tg_result::Ok => Ok(d),
        r => Err(r),
    }
}

#[test]
fn a_pinned_caller_gets_the_decisions_of_its_key() {
    let l = limiter();
    let write = class(&l, "write").unwrap();
    let p = pin(&l, b"acme", b"alice", write).unwrap();
    for _ in 0..2 {
        assert_eq!(
            admit_pinned(l.0, p.0).unwrap().kind,
            tg_decision_kind::Admit
        );
    }
    // The pin and the key share the buckets: both refused now, with the profile's code.
    let d = admit_pinned(l.0, p.0).unwrap();
    assert_eq!((d.kind, d.http_status), (tg_decision_kind::Throttle, 429));
    assert_eq!(code(&d), "slow_down");
    assert_eq!(
        admit(&l, b"acme", b"alice", write).unwrap().kind,
        tg_decision_kind::Throttle
    );
    // Anonymous: the network prefix, as tg_admit_anonymous keys it.
    let mut anon = null_mut();
    let ip = [192u8, 0, 2, 7];
    // SAFETY: as above.
    assert_eq!(
        unsafe { tg_pin_anonymous(l.0, ip.as_ptr(), 4, write, &mut anon) },
        tg_result::Ok
    );
    let anon = Pin(anon);
    assert_eq!(
        admit_pinned(l.0, anon.0).unwrap().kind,
        tg_decision_kind::Admit
    );
    assert_eq!(
        admit_anonymous(&l, &[192, 0, 2, 200], write).unwrap().kind,
        tg_decision_kind::Admit
    );
    assert_eq!(
        admit_pinned(l.0, anon.0).unwrap().kind,
        tg_decision_kind::Throttle
    );
}

#[test]
fn bad_arguments_and_a_foreign_pin_are_refused() {
    let (l, other) = (limiter(), limiter());
    assert_eq!(pin(&l, b"", b"alice", 0).err(), Some(tg_result::EmptyKey));
    assert_eq!(
        pin(&l, b"acme", b"alice", 9).err(),
        Some(tg_result::UnknownRouteClass)
    );
    let p = pin(&l, b"acme", b"alice", 0).unwrap();
    assert_eq!(
        admit_pinned(null(), p.0).err(),
        Some(tg_result::NullArgument)
    );
    assert_eq!(
        admit_pinned(l.0, null()).err(),
        Some(tg_result::NullArgument)
    );
    // SAFETY: 1. `l.0` and `p.0` are live; a NULL `out` is refused before anything happens.
    assert_eq!(
        unsafe { tg_admit_pinned(l.0, p.0, null_mut()) },
        tg_result::NullArgument
    );
    assert_eq!(
        admit_pinned(other.0, p.0).err(),
        Some(tg_result::ForeignPin)
    );
    // Nothing was charged by the refusals: two admits left.
    for _ in 0..2 {
        assert_eq!(
            admit_pinned(l.0, p.0).unwrap().kind,
            tg_decision_kind::Admit
        );
    }
    let mut out = null_mut();
    // SAFETY: a NULL limiter and an address of 5 bytes are refused; `out` stays NULL.
    unsafe {
        assert_eq!(
            tg_pin_anonymous(null(), [1u8; 4].as_ptr(), 4, 0, &mut out),
            tg_result::NullArgument
        );
        assert_eq!(
            tg_pin_anonymous(l.0, [1u8; 5].as_ptr(), 5, 0, &mut out),
            tg_result::InvalidIpLength
        );
        tg_pinned_free(null_mut());
    }
    assert!(out.is_null());
}
