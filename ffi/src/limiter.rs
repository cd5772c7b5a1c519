//! The limiter's functions: make one, resolve route classes, admit, reload, free.

use core::ffi::c_char;

use tollgate::{BuildError, Key, Limiter, Profile};

use crate::args::{ip_arg, out_arg, str_arg, usual_ids, Out};
use crate::cast::{borrow, free_boxed, into_boxed_ptr};
use crate::handle::Handle;
use crate::panic::panic_boundary;
use crate::profile_error::{with_detail, Detail};
use crate::{tg_decision, tg_limiter, tg_profile_error, tg_result};

/// Builds a limiter from a YAML profile (`len` bytes at `yaml`, UTF-8, no NUL needed) and writes
/// it to `*out`. Free it with `tg_limiter_free`.
///
/// Returns `TG_RESULT_INVALID_PROFILE` for a profile that does not parse or validate (use
/// `tg_limiter_new_from_yaml_err` for the message and position), `TG_RESULT_OUT_OF_MEMORY` when
/// the identity table cannot be allocated.
///
/// # Safety
/// `yaml` is valid for reads of `len` bytes; `out` is NULL or valid for a write of one pointer.
#[no_mangle]
pub unsafe extern "C" fn tg_limiter_new_from_yaml(
    yaml: *const c_char,
    len: usize,
    out: *mut *mut tg_limiter,
) -> tg_result {
    // SAFETY: 1. The caller's guarantees on `yaml`, `len` and `out` are those of the `_err`
    // function. 2. A NULL `err` is allowed and never written.
    unsafe { tg_limiter_new_from_yaml_err(yaml, len, core::ptr::null_mut(), out) }
}

/// As `tg_limiter_new_from_yaml`; on failure, also fills `*err` (if `err` is not NULL) with the
/// message and, for `TG_RESULT_INVALID_PROFILE`, the line and column of the offending value.
///
/// # Safety
/// `yaml` is valid for reads of `len` bytes; `err` is NULL or valid for a write of one
/// `tg_profile_error`; `out` is NULL or valid for a write of one pointer.
#[no_mangle]
pub unsafe extern "C" fn tg_limiter_new_from_yaml_err(
    yaml: *const c_char,
    len: usize,
    err: *mut tg_profile_error,
    out: *mut *mut tg_limiter,
) -> tg_result {
    let body = || {
        let out = out_arg(out)?;
        // SAFETY: 1. `yaml` is valid for `len` bytes during this call (caller's contract), and
        // the string is not kept past it.
        let yaml = unsafe { str_arg(yaml, len) }?;
        let profile =
            Profile::from_yaml(yaml).map_err(|e| Detail::profile(tg_result::InvalidProfile, &e))?;
        let limiter = Limiter::builder(profile).build().map_err(|e| match e {
            BuildError::OutOfMemory { .. } => Detail::from(tg_result::OutOfMemory),
            // No secret is set, so the builder makes its own random one.
            BuildError::EmptySecret => Detail::from(tg_result::Panic),
            // `from_yaml` validated it; kept for a builder that checks more than parsing does.
            BuildError::Profile(e) => Detail::profile(tg_result::InvalidProfile, &e),
            // The C ABI does not ask for the coarse clock.
            BuildError::CoarseClockInterval(_) | BuildError::CoarseClockThread(_) => {
                Detail::from(tg_result::Panic)
            }
        })?;
        let handle = into_boxed_ptr::<tg_limiter>(Handle::new(limiter));
        // SAFETY: 1. `out` is not NULL (checked) and valid for a write of one pointer (caller's
        // contract).
        unsafe { out.write(handle) };
        Ok(())
    };
    // SAFETY: 1. `err` is NULL or valid for a write (caller's contract).
    panic_boundary(|| unsafe { with_detail(err, body) })
}

/// Frees a limiter. NULL is a no-op. Every other call on `limiter` must have returned, and the
/// `code` strings of its decisions are freed with it.
///
/// # Safety
/// `limiter` is NULL or came from `tg_limiter_new_from_yaml` and was not freed yet.
#[no_mangle]
pub unsafe extern "C" fn tg_limiter_free(limiter: *mut tg_limiter) {
    // SAFETY: 1. `limiter` is NULL or a live handle from `into_boxed_ptr` that no other thread
    // uses (caller's contract).
    panic_boundary(|| unsafe { free_boxed(limiter) })
}

/// Writes to `*out` the number of the route class named by `name` (`len` bytes), which
/// `tg_admit` takes. Resolve names once, at start-up.
///
/// # Safety
/// `limiter` is NULL or a live limiter; `name` is valid for reads of `len` bytes; `out` is NULL
/// or valid for a write of one `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn tg_route_class(
    limiter: *const tg_limiter,
    name: *const c_char,
    len: usize,
    out: *mut u32,
) -> tg_result {
    panic_boundary(|| {
        // SAFETY: 1. `limiter` is NULL or live during this call (caller's contract).
        let handle = unsafe { borrow(limiter) }?;
        // SAFETY: 1. `name` is valid for `len` bytes during this call (caller's contract).
        let name = unsafe { str_arg(name, len) }?;
        let out = out_arg(out)?;
        let class = handle
            .limiter
            .route_class(name)
            .ok_or(tg_result::UnknownRouteClass)?;
        // SAFETY: 1. `out` is not NULL (checked) and valid for a write (caller's contract).
        unsafe { out.write(class.index()) };
        Ok(())
    })
}

/// Decides one request of an authenticated caller, charging it if admitted, and writes the
/// decision to `*out`. `tenant` and `principal` are 1 to 1024 bytes of UTF-8 each; `route_class`
/// comes from `tg_route_class`. Every argument is checked before anything is charged.
///
/// # Safety
/// `limiter` is NULL or a live limiter; `tenant` and `principal` are valid for reads of their
/// lengths; `out` is NULL or valid for a write of one `tg_decision`.
#[no_mangle]
pub unsafe extern "C" fn tg_admit(
    limiter: *const tg_limiter,
    tenant: *const c_char,
    tenant_len: usize,
    principal: *const c_char,
    principal_len: usize,
    route_class: u32,
    out: *mut tg_decision,
) -> tg_result {
    // SAFETY: 1. The caller's guarantees are those of `on_authenticated_key`.
    unsafe {
        on_authenticated_key(
            limiter,
            (tenant, tenant_len),
            (principal, principal_len),
            route_class,
            out,
            |h, k, out| h.put_decision(h.limiter.admit(k), out),
        )
    }
}

/// As `tg_admit`, for a request of weighted cost `n`: charges `n` tokens of both of the
/// caller's buckets (and `n` shard slots), all or nothing. `n = 0` checks without charging (the
/// answer `tg_admit` would give now). A cost larger than a bucket of the route class holds is
/// `TG_DECISION_KIND_EXCEEDS` (HTTP 429, no wait: `retry_after_ms` is `TG_RETRY_AFTER_NONE`),
/// and nothing is charged. `tg_admit_n(..., 1, out)` is `tg_admit(..., out)`.
///
/// # Safety
/// As `tg_admit`.
#[no_mangle]
pub unsafe extern "C" fn tg_admit_n(
    limiter: *const tg_limiter,
    tenant: *const c_char,
    tenant_len: usize,
    principal: *const c_char,
    principal_len: usize,
    route_class: u32,
    n: u32,
    out: *mut tg_decision,
) -> tg_result {
    // SAFETY: 1. The caller's guarantees are those of `on_authenticated_key`.
    unsafe {
        on_authenticated_key(
            limiter,
            (tenant, tenant_len),
            (principal, principal_len),
            route_class,
            out,
            |h, k, out| h.put_decision(h.limiter.admit_n(k, n), out),
        )
    }
}

/// As `tg_admit_anonymous`, for a request of weighted cost `n` (see `tg_admit_n`).
///
/// # Safety
/// As `tg_admit_anonymous`.
#[no_mangle]
pub unsafe extern "C" fn tg_admit_anonymous_n(
    limiter: *const tg_limiter,
    ip: *const u8,
    ip_len: usize,
    route_class: u32,
    n: u32,
    out: *mut tg_decision,
) -> tg_result {
    // SAFETY: 1. The caller's guarantees are those of `on_anonymous_key`.
    unsafe {
        on_anonymous_key(limiter, ip, ip_len, route_class, out, |h, k, out| {
            h.put_decision(h.limiter.admit_n(k, n), out);
        })
    }
}

/// Decides one request of an unauthenticated caller, keyed by its network prefix: `ip` is the
/// address in network byte order, `ip_len` 4 (IPv4) or 16 (IPv6; IPv4-mapped addresses count as
/// IPv4).
///
/// # Safety
/// `limiter` is NULL or a live limiter; `ip` is valid for reads of `ip_len` bytes; `out` is NULL
/// or valid for a write of one `tg_decision`.
#[no_mangle]
pub unsafe extern "C" fn tg_admit_anonymous(
    limiter: *const tg_limiter,
    ip: *const u8,
    ip_len: usize,
    route_class: u32,
    out: *mut tg_decision,
) -> tg_result {
    // SAFETY: 1. The caller's guarantees are those of `on_anonymous_key`.
    unsafe {
        on_anonymous_key(limiter, ip, ip_len, route_class, out, |h, k, out| {
            h.put_decision(h.limiter.admit(k), out);
        })
    }
}

/// The body of `tg_admit`, `tg_admit_n` and `tg_pin`: every argument checked, then `f` on the
/// handle, the key and `out`, which it writes.
///
/// The usual call (pointers set, ids ASCII and of valid length, a known class) is checked at
/// once, in a few instructions; anything else goes to `on_checked_key`, which checks each
/// argument in turn for the error to report. It takes the arguments in the order this function
/// does, so that the fast checks leave them where the call needs them.
///
/// # Safety
/// As `tg_admit`, with `out` NULL or valid for a write of one `T`.
#[inline(always)]
pub(crate) unsafe fn on_authenticated_key<T>(
    limiter: *const tg_limiter,
    tenant: (*const c_char, usize),
    principal: (*const c_char, usize),
    route_class: u32,
    out: *mut T,
    f: impl FnOnce(&Handle, &Key<'_>, Out<'_, T>),
) -> tg_result {
    // SAFETY: 1. `limiter` is NULL or live during this call (caller's contract).
    let Ok(handle) = (unsafe { borrow(limiter) }) else {
        return tg_result::NullArgument;
    };
    // SAFETY: 1. `tenant` and `principal` are valid for their lengths during this call
    // (caller's contract); the key borrows them only until `f` returns.
    let usual = unsafe { usual_ids(tenant, principal) };
    // SAFETY: 1. `out` is NULL or valid for a write during this call (caller's contract).
    let checked_out = unsafe { Out::new(out) };
    match (usual, checked_out, handle.class(route_class)) {
        (Some((tenant, principal)), Ok(out), Ok(class)) => panic_boundary(|| {
            let key = Key::authenticated(tenant, principal, class);
            // SAFETY: `usual_ids` checked that both ids are 1 to `MAX_ID_LEN` bytes, the one
            // case in which `authenticated` returns a key (its documented contract).
            let key = unsafe { key.unwrap_unchecked() };
            f(handle, &key, out);
            Ok(())
        }),
        // SAFETY: 1. The caller's guarantees are those `on_checked_key` needs.
        _ => unsafe { on_checked_key(limiter, tenant, principal, route_class, out, f) },
    }
}

/// `on_authenticated_key` for a call its fast checks did not pass: each argument checked in the
/// order the C ABI reports errors.
///
/// # Safety
/// As `on_authenticated_key`.
#[inline(never)]
unsafe fn on_checked_key<T>(
    limiter: *const tg_limiter,
    (tenant, tenant_len): (*const c_char, usize),
    (principal, principal_len): (*const c_char, usize),
    route_class: u32,
    out: *mut T,
    f: impl FnOnce(&Handle, &Key<'_>, Out<'_, T>),
) -> tg_result {
    panic_boundary(|| {
        // SAFETY: 1. `limiter` is NULL or live during this call (caller's contract).
        let handle = unsafe { borrow(limiter) }?;
        // SAFETY: 1. `tenant` and `principal` are valid for their lengths during this call
        // (caller's contract); the key borrows them only until `f` returns.
        let (tenant, principal) = unsafe {
            (
                str_arg(tenant, tenant_len)?,
                str_arg(principal, principal_len)?,
            )
        };
        // SAFETY: 1. `out` is NULL or valid for a write during this call (caller's contract).
        let out = unsafe { Out::new(out) }?;
        let key = Key::authenticated(tenant, principal, handle.class(route_class)?)?;
        f(handle, &key, out);
        Ok(())
    })
}

/// The body of `tg_admit_anonymous`, `tg_admit_anonymous_n` and `tg_pin_anonymous`.
///
/// # Safety
/// As `tg_admit_anonymous`, with `out` NULL or valid for a write of one `T`.
#[inline(always)]
pub(crate) unsafe fn on_anonymous_key<T>(
    limiter: *const tg_limiter,
    ip: *const u8,
    ip_len: usize,
    route_class: u32,
    out: *mut T,
    f: impl FnOnce(&Handle, &Key<'_>, Out<'_, T>),
) -> tg_result {
    panic_boundary(|| {
        // SAFETY: 1. `limiter` is NULL or live during this call (caller's contract).
        let handle = unsafe { borrow(limiter) }?;
        // SAFETY: 1. `ip` is valid for `ip_len` bytes during this call (caller's contract).
        let peer = unsafe { ip_arg(ip, ip_len) }?;
        // SAFETY: 1. `out` is NULL or valid for a write during this call (caller's contract).
        let out = unsafe { Out::new(out) }?;
        let key = Key::anonymous(peer, handle.class(route_class)?);
        f(handle, &key, out);
        Ok(())
    })
}

/// Replaces the limiter's profile with a new YAML one, keeping every caller's state. It may run
/// while other threads admit: each decision uses the old limits or the new ones (and, for a
/// moment after the swap, may still carry the old catalog code). Refused, with
/// the old profile left in force, when the new one is invalid (`TG_RESULT_INVALID_PROFILE`) or
/// removes a route class, or changes `identities.capacity` or the `anonymous` prefixes
/// (`TG_RESULT_RELOAD_REFUSED`). Class numbers from `tg_route_class` stay valid; a class the new
/// profile adds gets the next number. Each bucket keeps its state exactly (a debt carries over in full).
///
/// # Safety
/// `limiter` is NULL or a live limiter; `yaml` is valid for reads of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tg_limiter_reload(
    limiter: *mut tg_limiter,
    yaml: *const c_char,
    len: usize,
) -> tg_result {
    // SAFETY: 1. The caller's guarantees are those of the `_err` function. 2. A NULL `err` is
    // allowed and never written.
    unsafe { tg_limiter_reload_err(limiter, yaml, len, core::ptr::null_mut()) }
}

/// As `tg_limiter_reload`; on failure, also fills `*err` (if `err` is not NULL).
///
/// # Safety
/// `limiter` is NULL or a live limiter; `yaml` is valid for reads of `len` bytes; `err` is NULL
/// or valid for a write of one `tg_profile_error`.
#[no_mangle]
pub unsafe extern "C" fn tg_limiter_reload_err(
    limiter: *mut tg_limiter,
    yaml: *const c_char,
    len: usize,
    err: *mut tg_profile_error,
) -> tg_result {
    let body = || {
        // SAFETY: 1. `limiter` is NULL or live during this call (caller's contract); it is only
        // borrowed shared, so concurrent admits are fine.
        let handle = unsafe { borrow(limiter.cast_const()) }?;
        // SAFETY: 1. `yaml` is valid for `len` bytes during this call (caller's contract).
        let yaml = unsafe { str_arg(yaml, len) }?;
        let profile =
            Profile::from_yaml(yaml).map_err(|e| Detail::profile(tg_result::InvalidProfile, &e))?;
        let mut interned = handle.interned();
        reload_limiter(&handle.limiter, profile)?;
        handle.publish(&mut interned);
        Ok(())
    };
    // SAFETY: 1. `err` is NULL or valid for a write (caller's contract).
    panic_boundary(|| unsafe { with_detail(err, body) })
}

/// Applies `profile` to the limiter: `Limiter::reload` keeps every bucket's state, swaps the
/// limits atomically, and refuses (`ReloadRefused`) a profile that removes a route class or
/// changes `identities.capacity` or the anonymous prefixes. The profile has already been
/// validated, so a refusal is the only error.
fn reload_limiter(limiter: &Limiter, profile: Profile) -> Result<(), Detail> {
    limiter
        .reload(profile)
        .map_err(|e| Detail::profile(tg_result::ReloadRefused, &e))
}
