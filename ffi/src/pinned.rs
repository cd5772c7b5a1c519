//! Pinned identities over the C ABI: a caller resolved once (`tg_pin`, `tg_pin_anonymous`),
//! then decided for with `tg_admit_pinned`, which reads no strings and hashes nothing: for a
//! connection, a session or a tenant object that decides many times for one caller.

use core::ffi::c_char;

use tollgate::Pinned;

use crate::args::Out;
use crate::cast::{borrow, free_boxed, into_boxed_ptr, Castable, OwnershipBox};
use crate::limiter::{on_anonymous_key, on_authenticated_key};
use crate::panic::panic_boundary;
use crate::{tg_decision, tg_limiter, tg_result};

/// A caller of one limiter, resolved once: opaque, made by `tg_pin` or `tg_pin_anonymous`,
/// freed by `tg_pinned_free`. It holds no string of the caller's; it may be used from many
/// threads at once, and stays valid across reloads, until it or its limiter is freed.
pub struct tg_pinned {
    _private: [u8; 0],
}

impl Castable for tg_pinned {
    type Ownership = OwnershipBox;
    type RustType = Pinned;
}

/// Resolves an authenticated caller (as `tg_admit` takes it) for `tg_admit_pinned`, and writes
/// the pin to `*out`. Free it with `tg_pinned_free`. Every argument is checked as `tg_admit`
/// checks it.
///
/// # Safety
/// `limiter` is NULL or a live limiter; `tenant` and `principal` are valid for reads of their
/// lengths; `out` is NULL or valid for a write of one pointer.
#[no_mangle]
pub unsafe extern "C" fn tg_pin(
    limiter: *const tg_limiter,
    tenant: *const c_char,
    tenant_len: usize,
    principal: *const c_char,
    principal_len: usize,
    route_class: u32,
    out: *mut *mut tg_pinned,
) -> tg_result {
    // SAFETY: 1. The caller's guarantees are those of `on_authenticated_key`.
    unsafe {
        on_authenticated_key(
            limiter,
            (tenant, tenant_len),
            (principal, principal_len),
            route_class,
            out,
            |h, k, out| out.put(into_boxed_ptr::<tg_pinned>(h.limiter.pin(k))),
        )
    }
}

/// As `tg_pin`, for an unauthenticated caller keyed by its network prefix (as
/// `tg_admit_anonymous` takes its address).
///
/// # Safety
/// `limiter` is NULL or a live limiter; `ip` is valid for reads of `ip_len` bytes; `out` is NULL
/// or valid for a write of one pointer.
#[no_mangle]
pub unsafe extern "C" fn tg_pin_anonymous(
    limiter: *const tg_limiter,
    ip: *const u8,
    ip_len: usize,
    route_class: u32,
    out: *mut *mut tg_pinned,
) -> tg_result {
    // SAFETY: 1. The caller's guarantees are those of `on_anonymous_key`.
    unsafe {
        on_anonymous_key(limiter, ip, ip_len, route_class, out, |h, k, out| {
            out.put(into_boxed_ptr::<tg_pinned>(h.limiter.pin(k)));
        })
    }
}

/// Decides one request of a pinned caller, charging it if admitted: the decision `tg_admit`
/// would give for the key it was pinned with. `TG_RESULT_FOREIGN_PIN` for a pin of another
/// limiter; nothing is charged then.
///
/// # Safety
/// `limiter` is NULL or a live limiter; `pinned` is NULL or a live pin; `out` is NULL or valid
/// for a write of one `tg_decision`.
#[no_mangle]
pub unsafe extern "C" fn tg_admit_pinned(
    limiter: *const tg_limiter,
    pinned: *const tg_pinned,
    out: *mut tg_decision,
) -> tg_result {
    panic_boundary(|| {
        // SAFETY: 1. `limiter` and `pinned` are NULL or live during this call (caller's
        // contract).
        let (handle, pin) = unsafe { (borrow(limiter)?, borrow(pinned)?) };
        // SAFETY: 1. `out` is NULL or valid for a write during this call (caller's contract).
        let out = unsafe { Out::new(out) }?;
        if !pin.belongs_to(&handle.limiter) {
            return Err(tg_result::ForeignPin);
        }
        handle.put_decision(handle.limiter.admit_pinned(pin), out);
        Ok(())
    })
}

/// Frees a pin. NULL is a no-op. Every other call on `pinned` must have returned.
///
/// # Safety
/// `pinned` is NULL or came from `tg_pin` or `tg_pin_anonymous` and was not freed yet.
#[no_mangle]
pub unsafe extern "C" fn tg_pinned_free(pinned: *mut tg_pinned) {
    // SAFETY: 1. `pinned` is NULL or a live pin from `into_boxed_ptr` that no other thread uses
    // (caller's contract).
    panic_boundary(|| unsafe { free_boxed(pinned) })
}
