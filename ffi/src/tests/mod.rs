//! The extern functions called from Rust, with the pointers and lengths C could pass: the
//! helpers here, the tests by concern in the modules below.

mod admit;
mod arguments;
mod codes;
mod pinned;
mod profile;

use core::ffi::c_char;
use core::ptr::null_mut;
use std::ffi::CStr;

use crate::profile_error::Detail;
use crate::*;

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

fn reload(l: &Owned, yaml: &str) -> Result<(), (tg_result, String)> {
    let mut err = tg_profile_error::from_detail(&Detail::from(tg_result::Ok));
    // SAFETY: 1. `l.0` is live. 2. `yaml` is valid for its length. 3. `err` is a valid place.
    match unsafe { tg_limiter_reload_err(l.0, yaml.as_ptr().cast(), yaml.len(), &mut err) } {
        tg_result::Ok => Ok(()),
        r => Err((r, message(&err))),
    }
}
