//! The C ABI of tollgate (crate `tollgate-ffi`): an opaque limiter handle, result codes, and a decision struct.
//!
//! The header `include/tollgate.h` is generated from this module by cbindgen (`cbindgen.toml`);
//! `tests/ffi_header.rs` fails when the checked-in header differs from what cbindgen makes now.
//!
//! # API conventions
//!
//! - **Results.** Every function that can fail returns a [`tg_result`]; `TG_RESULT_OK` (0) is
//!   success and every other code is in the 7000s, grouped by cause, and never renumbered.
//!   [`tg_error_message`] turns a code into text.
//! - **Output parameters come last** and are written only on success: on failure the caller's
//!   memory is left exactly as it was. The one exception is the optional [`tg_profile_error`] of
//!   the `_err` functions, which exists to be written on failure (and is never written on
//!   success).
//! - **Strings in** are a pointer and a length in bytes, UTF-8, with no NUL needed. The library
//!   reads them only during the call and keeps no pointer to them. A NULL pointer is
//!   `TG_RESULT_NULL_ARGUMENT` even with a length of 0, a length above `PTRDIFF_MAX` is
//!   `TG_RESULT_LENGTH_OVERFLOW`.
//! - **Ownership.** A `tg_limiter *` from [`tg_limiter_new_from_yaml`] belongs to the caller until
//!   it passes it to [`tg_limiter_free`] (which accepts NULL). The `code` string of a
//!   [`tg_decision`] belongs to the limiter and stays valid until `tg_limiter_free`, across
//!   reloads; the caller never frees it. [`tg_version`]'s string is static. Everything else
//!   the caller passes in (buffers, output structs) stays the caller's.
//! - **Threads.** A limiter may be used from any number of threads at once: `tg_admit`,
//!   `tg_admit_anonymous`, `tg_route_class` and `tg_limiter_reload` may all run concurrently.
//!   Only `tg_limiter_free` needs every other call on that limiter to have returned.
//! - **No panics cross the boundary.** Every body runs inside one `catch_unwind`; a panic (a bug
//!   in tollgate) is reported as `TG_RESULT_PANIC`.
//!
//! # Profile errors
//!
//! [`tg_limiter_new_from_yaml`] and [`tg_limiter_reload`] only return `TG_RESULT_INVALID_PROFILE`
//! or `TG_RESULT_RELOAD_REFUSED`. Their `_err` twins also fill a caller-owned
//! [`tg_profile_error`] with the message and its line and column. This was chosen over a
//! thread-local "last error": the error travels with the call, so it is right in Go (whose
//! goroutines move between OS threads between two cgo calls) and in thread pools, and there is
//! no hidden state to free.
//!
//! # Catalog codes
//!
//! A refusal's `code` is the profile's catalog code (`catalog.throttled.code`, ...), as the HTTP
//! middleware sends it. Those are runtime strings, so the limiter interns them: each distinct
//! code that any profile of this limiter (the first and every reload) has named is kept as a
//! NUL-terminated copy until [`tg_limiter_free`]. A pointer from an earlier decision therefore
//! stays valid after a reload changes the catalog; memory grows only by codes never seen before.

#![allow(non_camel_case_types)]

use core::ffi::c_char;
use core::time::Duration;
use std::ffi::{CStr, CString};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::panic::{catch_unwind, AssertUnwindSafe};
// The handle's own words are plain std atomics rather than `crate::sync`'s: they are not part
// of the table that the loom models check, and loom's types only work inside a model.
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Mutex;

use tollgate::{BucketKind, CatalogEntry, Cause, Decision};
use tollgate::{BuildError, Limiter};
use tollgate::{Key, KeyError, RouteClass};
use tollgate::{Profile, ProfileError};

// ---------------------------------------------------------------------------------------------
// Result codes.

/// What a call did. `TG_RESULT_OK` is 0; failures are in the 7000s, grouped by cause (arguments,
/// route classes, profiles, resources, bugs). Values are never renumbered or reused.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum tg_result {
    /// Success.
    Ok = 0,

    // 7000-7099: the caller's arguments.
    /// A pointer that must not be NULL was NULL (strings too, even with a length of 0).
    NullArgument = 7000,
    /// A length was larger than `PTRDIFF_MAX`.
    LengthOverflow = 7001,
    /// A string was not valid UTF-8.
    InvalidUtf8 = 7002,
    /// The tenant or principal id was empty.
    EmptyKey = 7003,
    /// The tenant or principal id was longer than 1024 bytes.
    KeyTooLong = 7004,
    /// An IP address was neither 4 (IPv4) nor 16 (IPv6) bytes.
    InvalidIpLength = 7005,
    /// The output buffer was too small; nothing was written.
    BufferTooSmall = 7006,

    // 7100-7199: route classes.
    /// The route class name or number is not one of this limiter's profile.
    UnknownRouteClass = 7100,

    // 7200-7299: profiles.
    /// The profile did not parse or did not validate.
    InvalidProfile = 7200,
    /// The profile is valid but cannot replace the one in force (it removes a route class, or
    /// changes `identities.capacity` or the anonymous prefixes); the old profile stays in force.
    ReloadRefused = 7201,

    // 7300-7399: resources.
    /// The identity table could not be allocated.
    OutOfMemory = 7300,

    // 7900-7999: bugs.
    /// tollgate panicked (a bug); the panic was caught at the boundary.
    Panic = 7900,
}

/// A buffer of this many bytes holds any message of `tg_error_message`, with its NUL.
pub const TG_ERROR_MESSAGE_CAPACITY: usize = 128;

/// Every result code, in order.
const ALL_RESULTS: [tg_result; 13] = [
    tg_result::Ok,
    tg_result::NullArgument,
    tg_result::LengthOverflow,
    tg_result::InvalidUtf8,
    tg_result::EmptyKey,
    tg_result::KeyTooLong,
    tg_result::InvalidIpLength,
    tg_result::BufferTooSmall,
    tg_result::UnknownRouteClass,
    tg_result::InvalidProfile,
    tg_result::ReloadRefused,
    tg_result::OutOfMemory,
    tg_result::Panic,
];

/// The longest tenant or principal id that `tg_admit` takes, in bytes.
pub const TG_MAX_ID_LEN: usize = 1024;
const _: () = assert!(TG_MAX_ID_LEN == tollgate::MAX_ID_LEN);

impl tg_result {
    /// The code for a number, if it is one.
    pub fn from_u32(code: u32) -> Option<tg_result> {
        ALL_RESULTS.into_iter().find(|r| *r as u32 == code)
    }

    /// What the code means, in one sentence (shorter than `TG_ERROR_MESSAGE_CAPACITY`).
    pub fn message(self) -> &'static str {
        match self {
            tg_result::Ok => "success",
            tg_result::NullArgument => "a required pointer argument is NULL",
            tg_result::LengthOverflow => "a length is larger than PTRDIFF_MAX",
            tg_result::InvalidUtf8 => "a string argument is not valid UTF-8",
            tg_result::EmptyKey => "the tenant or principal id is empty",
            tg_result::KeyTooLong => "the tenant or principal id is longer than 1024 bytes",
            tg_result::InvalidIpLength => "an IP address must be 4 (IPv4) or 16 (IPv6) bytes",
            tg_result::BufferTooSmall => "the output buffer is too small",
            tg_result::UnknownRouteClass => "no such route class in this limiter's profile",
            tg_result::InvalidProfile => "the profile is invalid",
            tg_result::ReloadRefused => {
                "the profile cannot replace the one in force (a route class removed, or the \
                 capacity or anonymous prefixes changed)"
            }
            tg_result::OutOfMemory => "cannot allocate the identity table",
            tg_result::Panic => "tollgate panicked: this is a bug, please report it",
        }
    }
}

/// The message for a number that is no `tg_result`.
const UNKNOWN_RESULT_MESSAGE: &str = "unknown tollgate result code";

impl From<KeyError> for tg_result {
    fn from(e: KeyError) -> Self {
        match e {
            KeyError::EmptyTenant | KeyError::EmptyPrincipal => tg_result::EmptyKey,
            KeyError::TooLong => tg_result::KeyTooLong,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Decisions.

/// The kind of a decision.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum tg_decision_kind {
    /// Admitted: serve the request.
    Admit = 0,
    /// The caller's own quota is used up: HTTP 429 with `Retry-After`.
    Throttle = 1,
    /// Shared capacity or the limiter's store refused: HTTP 503.
    Unavailable = 2,
}

/// For a throttle, which of the caller's buckets is empty (for operators).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum tg_bucket_kind {
    /// Not a throttle.
    None = 0,
    /// The short-period bucket that bounds bursts.
    Burst = 1,
    /// The long-period bucket that bounds sustained use.
    Sustained = 2,
}

/// For an unavailable decision, which shared resource refused (for operators; never tell the
/// caller, who only sees `code`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum tg_cause {
    /// Not an unavailable decision.
    None = 0,
    /// The caller's shard has used all its admission slots in this window.
    ShardFull = 1,
    /// The caller's tenant has used its share of the shard's slots in this window.
    TenantShare = 2,
    /// The identity table has no slot for a new identity.
    TableFull = 3,
    /// The shared store is unreachable, erroring or too slow.
    StoreUnavailable = 4,
}

/// `retry_after_ms` when there is no wait to tell (admitted, or no safe estimate).
pub const TG_RETRY_AFTER_NONE: u64 = u64::MAX;

/// The answer to one request.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct tg_decision {
    /// Admit, throttle (429) or unavailable (503).
    pub kind: tg_decision_kind,
    /// 200 for admit (the handler picks the real status), 429 or 503.
    pub http_status: u16,
    /// For a throttle, the empty bucket; `TG_BUCKET_KIND_NONE` otherwise.
    pub bucket: tg_bucket_kind,
    /// For an unavailable decision, the resource that refused; `TG_CAUSE_NONE` otherwise.
    pub cause: tg_cause,
    /// The wait before the same request would be admitted, in milliseconds rounded up;
    /// `TG_RETRY_AFTER_NONE` (`UINT64_MAX`) when there is none. HTTP's `Retry-After` is this in
    /// whole seconds, rounded up.
    pub retry_after_ms: u64,
    /// The profile's catalog code for a refusal (`"rate_limited"`, ...), `""` for admit; never
    /// NULL. NUL-terminated, owned by the limiter, valid until `tg_limiter_free`.
    pub code: *const c_char,
}

/// Milliseconds, rounded up; never `TG_RETRY_AFTER_NONE` (which means "no wait").
#[inline]
fn millis_up(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms)
        .unwrap_or(u64::MAX)
        .min(TG_RETRY_AFTER_NONE - 1)
}

// ---------------------------------------------------------------------------------------------
// Profile errors.

/// Bytes in `tg_profile_error`'s `message`, NUL included.
pub const TG_PROFILE_ERROR_MESSAGE_CAPACITY: usize = 512;

/// Why a profile was refused, filled by the `_err` functions on failure. Caller-owned: put it on
/// the stack, pass its address, read it after a failure.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tg_profile_error {
    /// 1-based line of the offending value in the YAML, 0 when unknown.
    pub line: u32,
    /// 1-based column of the offending value, 0 when unknown.
    pub column: u32,
    /// Length in bytes of the whole message, without the NUL. When it is at least
    /// `TG_PROFILE_ERROR_MESSAGE_CAPACITY`, `message` holds a truncated copy.
    pub message_len: usize,
    /// The message naming the field (for codes other than the profile ones, the text of
    /// `tg_error_message`), UTF-8, NUL-terminated, cut at a character boundary if too long.
    pub message: [c_char; TG_PROFILE_ERROR_MESSAGE_CAPACITY],
}

/// A profile error before it is copied out to C.
struct Detail {
    code: tg_result,
    message: String,
    line: Option<usize>,
    column: Option<usize>,
}

impl Detail {
    fn profile(code: tg_result, e: &ProfileError) -> Detail {
        Detail {
            code,
            message: e.message().to_owned(),
            line: e.line(),
            column: e.column(),
        }
    }
}

impl From<tg_result> for Detail {
    fn from(code: tg_result) -> Detail {
        Detail {
            code,
            message: code.message().to_owned(),
            line: None,
            column: None,
        }
    }
}

impl tg_profile_error {
    fn from_detail(d: &Detail) -> tg_profile_error {
        let mut message = [0 as c_char; TG_PROFILE_ERROR_MESSAGE_CAPACITY];
        let mut n = d.message.len().min(TG_PROFILE_ERROR_MESSAGE_CAPACITY - 1);
        while !d.message.is_char_boundary(n) {
            n -= 1;
        }
        for (dst, src) in message.iter_mut().zip(&d.message.as_bytes()[..n]) {
            *dst = *src as c_char;
        }
        let clamp = |v: Option<usize>| v.map_or(0, |v| u32::try_from(v).unwrap_or(u32::MAX));
        tg_profile_error {
            line: clamp(d.line),
            column: clamp(d.column),
            message_len: d.message.len(),
            message,
        }
    }
}

/// Runs `f`; on failure writes the detail to `err` (if not NULL) and returns the code.
///
/// # Safety
/// `err` is NULL or valid for a write of one `tg_profile_error`.
unsafe fn with_detail(
    err: *mut tg_profile_error,
    f: impl FnOnce() -> Result<(), Detail>,
) -> Result<(), tg_result> {
    f().map_err(|d| {
        if !err.is_null() {
            // SAFETY: 1. `err` is not NULL (checked above). 2. The caller guarantees that a
            // non-NULL `err` is valid and aligned for a write of one `tg_profile_error`.
            unsafe { err.write(tg_profile_error::from_detail(&d)) };
        }
        d.code
    })
}

// ---------------------------------------------------------------------------------------------
// The panic boundary.

/// Runs an `extern "C"` body inside `catch_unwind`, so that no panic unwinds into C.
///
/// The plain form takes a body of type `Result<(), tg_result>` (so `?` works) and returns a
/// `tg_result`, `TG_RESULT_PANIC` if the body panicked. The `on_panic = v;` form takes a body of
/// any type and returns `v` if it panicked.
macro_rules! ffi_panic_boundary {
    (on_panic = $fallback:expr; $($body:tt)*) => {
        match catch_unwind(AssertUnwindSafe(|| { $($body)* })) {
            Ok(v) => v,
            Err(_) => $fallback,
        }
    };
    ($($body:tt)*) => {
        match catch_unwind(AssertUnwindSafe(|| -> Result<(), tg_result> { $($body)* })) {
            Ok(Ok(())) => tg_result::Ok,
            Ok(Err(e)) => e,
            Err(_) => tg_result::Panic,
        }
    };
}

// ---------------------------------------------------------------------------------------------
// The handle.

/// A limiter, as C sees it: opaque, made by `tg_limiter_new_from_yaml`, freed by
/// `tg_limiter_free`.
pub struct tg_limiter {
    _private: [u8; 0],
}

/// What a `tg_limiter *` points to.
struct Handle {
    limiter: Limiter,
    /// Route classes of the profile in force: `class < classes` is checked before `admit`, which
    /// panics on a foreign class. Only grows (a reload may add classes, never remove one).
    classes: AtomicU32,
    /// The catalog code of each `CatalogEntry`, pointing into `interned`.
    codes: [AtomicPtr<c_char>; 3],
    /// Every code handed out since the handle was made, freed with it. The lock also serializes
    /// reloads, so that `codes` and `classes` end up matching the last one.
    interned: Mutex<Vec<CString>>,
}

impl tg_limiter {
    /// The one place a `Handle` becomes a `tg_limiter *`.
    fn into_raw(handle: Box<Handle>) -> *mut tg_limiter {
        Box::into_raw(handle).cast::<tg_limiter>()
    }

    /// The one place a `tg_limiter *` becomes a `&Handle`.
    ///
    /// # Safety
    /// `ptr` is NULL or came from `tg_limiter::into_raw` and has not been freed, and stays so
    /// for `'a`.
    unsafe fn borrow<'a>(ptr: *const tg_limiter) -> Result<&'a Handle, tg_result> {
        // SAFETY: 1. A non-NULL `ptr` came from `Box::into_raw` of a `Handle` (caller's
        // contract), so it is aligned and points to a live `Handle`. 2. It is only ever shared
        // (`&`), never `&mut`, so any number of threads may hold this borrow; `Handle` is `Sync`.
        // 3. It is not freed during `'a` (caller's contract).
        unsafe { ptr.cast::<Handle>().as_ref() }.ok_or(tg_result::NullArgument)
    }

    /// The one place a `tg_limiter *` is freed. NULL is a no-op.
    ///
    /// # Safety
    /// `ptr` is NULL or came from `tg_limiter::into_raw`, has not been freed, and no other
    /// thread uses it.
    unsafe fn free(ptr: *mut tg_limiter) {
        if !ptr.is_null() {
            // SAFETY: 1. `ptr` came from `Box::into_raw` of a `Handle` and was not freed yet
            // (caller's contract), so rebuilding the box gives back the one owner. 2. No other
            // borrow of it is alive (caller's contract).
            drop(unsafe { Box::from_raw(ptr.cast::<Handle>()) });
        }
    }
}

impl Handle {
    fn new(limiter: Limiter) -> Handle {
        let handle = Handle {
            limiter,
            classes: AtomicU32::new(0),
            codes: Default::default(),
            interned: Mutex::new(Vec::new()),
        };
        {
            let mut interned = handle.interned.lock().unwrap_or_else(|e| e.into_inner());
            handle.publish(&mut interned);
        }
        handle
    }

    /// Interns the catalog codes and the class count of the profile in force, and publishes
    /// them. Called with the `interned` lock held.
    fn publish(&self, interned: &mut Vec<CString>) {
        let profile = self.limiter.profile();
        let entries = [
            CatalogEntry::Throttled,
            CatalogEntry::OverCapacity,
            CatalogEntry::LimiterUnavailable,
        ];
        for (slot, entry) in self.codes.iter().zip(entries) {
            let code = profile.catalog.entry(entry).code.as_str();
            let ptr = match interned.iter().find(|c| c.as_bytes() == code.as_bytes()) {
                Some(c) => c.as_ptr(),
                None => match CString::new(code) {
                    Ok(c) => {
                        // The heap buffer of a `CString` does not move when the `Vec` grows,
                        // and nothing is removed before the handle is dropped.
                        let ptr = c.as_ptr();
                        interned.push(c);
                        ptr
                    }
                    // Profile validation allows only `[a-z0-9_]`; should a NUL ever pass, the
                    // built-in code for the entry is used.
                    Err(_) => default_code(entry).as_ptr(),
                },
            };
            // Release: a thread that loads this pointer also sees the bytes it points to.
            slot.store(ptr.cast_mut(), Ordering::Release);
        }
        let classes = u32::try_from(profile.route_classes.len()).unwrap_or(u32::MAX);
        // Release, after the limiter took the profile: a thread that sees the new count also
        // sees the limits of the new classes.
        self.classes.store(classes, Ordering::Release);
    }

    /// The route class `class`, if this limiter has it.
    #[inline]
    fn class(&self, class: u32) -> Result<RouteClass, tg_result> {
        if class < self.classes.load(Ordering::Acquire) {
            Ok(RouteClass::from_index(class))
        } else {
            Err(tg_result::UnknownRouteClass)
        }
    }

    #[inline]
    fn decision(&self, d: Decision) -> tg_decision {
        let code = match d.catalog_entry() {
            None => c"".as_ptr(),
            Some(e) => {
                let i = match e {
                    CatalogEntry::Throttled => 0,
                    CatalogEntry::OverCapacity => 1,
                    CatalogEntry::LimiterUnavailable => 2,
                };
                // Acquire pairs with the Release store in `publish`.
                self.codes[i].load(Ordering::Acquire).cast_const()
            }
        };
        let (kind, bucket, cause) = match d {
            Decision::Admit => (
                tg_decision_kind::Admit,
                tg_bucket_kind::None,
                tg_cause::None,
            ),
            Decision::Throttle { bucket, .. } => (
                tg_decision_kind::Throttle,
                match bucket {
                    BucketKind::Burst => tg_bucket_kind::Burst,
                    BucketKind::Sustained => tg_bucket_kind::Sustained,
                },
                tg_cause::None,
            ),
            Decision::Unavailable { cause, .. } => (
                tg_decision_kind::Unavailable,
                tg_bucket_kind::None,
                match cause {
                    Cause::ShardFull => tg_cause::ShardFull,
                    Cause::TenantShare => tg_cause::TenantShare,
                    Cause::TableFull => tg_cause::TableFull,
                    Cause::StoreUnavailable => tg_cause::StoreUnavailable,
                },
            ),
        };
        tg_decision {
            kind,
            http_status: d.http_status(),
            bucket,
            cause,
            retry_after_ms: d.retry_after().map_or(TG_RETRY_AFTER_NONE, millis_up),
            code,
        }
    }
}

/// The built-in code of a catalog entry (the profile's default).
fn default_code(entry: CatalogEntry) -> &'static CStr {
    match entry {
        CatalogEntry::Throttled => c"rate_limited",
        CatalogEntry::OverCapacity => c"over_capacity",
        CatalogEntry::LimiterUnavailable => c"limiter_unavailable",
    }
}

// ---------------------------------------------------------------------------------------------
// Arguments.

/// Bytes from C: not NULL, at most `isize::MAX` long.
///
/// # Safety
/// A non-NULL `ptr` is valid for reads of `len` bytes during `'a`, not written meanwhile.
#[inline]
unsafe fn bytes_arg<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], tg_result> {
    if ptr.is_null() {
        return Err(tg_result::NullArgument);
    }
    if len > isize::MAX as usize {
        return Err(tg_result::LengthOverflow);
    }
    // SAFETY: 1. `ptr` is not NULL (checked), and `u8` needs no alignment. 2. `len` is at most
    // `isize::MAX` (checked). 3. The caller guarantees `len` readable bytes at `ptr`, not
    // written during `'a`.
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// A UTF-8 string from C as pointer and length.
///
/// # Safety
/// As `bytes_arg`.
#[inline]
unsafe fn str_arg<'a>(ptr: *const c_char, len: usize) -> Result<&'a str, tg_result> {
    // SAFETY: 1. The caller's guarantees are those `bytes_arg` needs. 2. `c_char` and `u8` have
    // the same size and alignment.
    let bytes = unsafe { bytes_arg(ptr.cast::<u8>(), len) }?;
    core::str::from_utf8(bytes).map_err(|_| tg_result::InvalidUtf8)
}

/// An output pointer that is not NULL.
#[inline]
fn out_arg<T>(ptr: *mut T) -> Result<*mut T, tg_result> {
    if ptr.is_null() {
        Err(tg_result::NullArgument)
    } else {
        Ok(ptr)
    }
}

// ---------------------------------------------------------------------------------------------
// Reload.

/// Applies `profile` to the limiter: `Limiter::reload` keeps every bucket's state, swaps the
/// limits atomically, and refuses (`ReloadRefused`) a profile that removes a route class or
/// changes `identities.capacity` or the anonymous prefixes. The profile has already been
/// validated, so a refusal is the only error.
fn reload_limiter(limiter: &Limiter, profile: Profile) -> Result<(), Detail> {
    limiter
        .reload(profile)
        .map_err(|e| Detail::profile(tg_result::ReloadRefused, &e))
}

// ---------------------------------------------------------------------------------------------
// The functions.

/// The library's version, as a static NUL-terminated string (`"0.1.0"`).
#[no_mangle]
pub extern "C" fn tg_version() -> *const c_char {
    ffi_panic_boundary! { on_panic = core::ptr::null();
        concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast::<c_char>()
    }
}

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
    ffi_panic_boundary! {
        let body = || {
                let out = out_arg(out)?;
                // SAFETY: 1. `yaml` is valid for `len` bytes during this call (caller's
                // contract), and the string is not kept past it.
                let yaml = unsafe { str_arg(yaml, len) }?;
                let profile = Profile::from_yaml(yaml)
                    .map_err(|e| Detail::profile(tg_result::InvalidProfile, &e))?;
                let limiter = Limiter::builder(profile).build().map_err(|e| match e {
                    BuildError::OutOfMemory { .. } => Detail::from(tg_result::OutOfMemory),
                    // No secret is set, so the builder makes its own random one.
                    BuildError::EmptySecret => Detail::from(tg_result::Panic),
                    BuildError::Profile(e) => Detail::profile(tg_result::InvalidProfile, &e),
                })?;
                let handle = tg_limiter::into_raw(Box::new(Handle::new(limiter)));
                // SAFETY: 1. `out` is not NULL (checked) and valid for a write of one pointer
                // (caller's contract).
                unsafe { out.write(handle) };
                Ok(())
        };
        // SAFETY: 1. `err` is NULL or valid for a write (caller's contract).
        unsafe { with_detail(err, body) }
    }
}

/// Frees a limiter. NULL is a no-op. Every other call on `limiter` must have returned, and the
/// `code` strings of its decisions are freed with it.
///
/// # Safety
/// `limiter` is NULL or came from `tg_limiter_new_from_yaml` and was not freed yet.
#[no_mangle]
pub unsafe extern "C" fn tg_limiter_free(limiter: *mut tg_limiter) {
    ffi_panic_boundary! { on_panic = ();
        // SAFETY: 1. `limiter` is NULL or a live handle that no other thread uses (caller's
        // contract).
        unsafe { tg_limiter::free(limiter) }
    }
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
    ffi_panic_boundary! {
        // SAFETY: 1. `limiter` is NULL or live during this call (caller's contract).
        let handle = unsafe { tg_limiter::borrow(limiter) }?;
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
    }
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
    ffi_panic_boundary! {
        // SAFETY: 1. `limiter` is NULL or live during this call (caller's contract).
        let handle = unsafe { tg_limiter::borrow(limiter) }?;
        // SAFETY: 1. `tenant` and `principal` are valid for their lengths during this call
        // (caller's contract); the key borrows them only until `admit` returns.
        let (tenant, principal) =
            unsafe { (str_arg(tenant, tenant_len)?, str_arg(principal, principal_len)?) };
        let out = out_arg(out)?;
        let key = Key::authenticated(tenant, principal, handle.class(route_class)?)?;
        let decision = handle.decision(handle.limiter.admit(&key));
        // SAFETY: 1. `out` is not NULL (checked) and valid for a write (caller's contract).
        unsafe { out.write(decision) };
        Ok(())
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
    ffi_panic_boundary! {
        // SAFETY: 1. `limiter` is NULL or live during this call (caller's contract).
        let handle = unsafe { tg_limiter::borrow(limiter) }?;
        if ip.is_null() {
            return Err(tg_result::NullArgument);
        }
        let peer = match ip_len {
            // SAFETY: 1. `ip` is not NULL (checked) and valid for `ip_len` bytes (caller's
            // contract), which is 4 here.
            4 => IpAddr::V4(Ipv4Addr::from(unsafe { ip.cast::<[u8; 4]>().read_unaligned() })),
            // SAFETY: as above, with 16 bytes.
            16 => IpAddr::V6(Ipv6Addr::from(unsafe { ip.cast::<[u8; 16]>().read_unaligned() })),
            _ => return Err(tg_result::InvalidIpLength),
        };
        let out = out_arg(out)?;
        let key = Key::anonymous(peer, handle.class(route_class)?);
        let decision = handle.decision(handle.limiter.admit(&key));
        // SAFETY: 1. `out` is not NULL (checked) and valid for a write (caller's contract).
        unsafe { out.write(decision) };
        Ok(())
    }
}

/// Replaces the limiter's profile with a new YAML one, keeping every caller's state. It may run
/// while other threads admit: each decision uses the old limits or the new ones (and, for a
/// moment after the swap, may still carry the old catalog code). Refused, with
/// the old profile left in force, when the new one is invalid (`TG_RESULT_INVALID_PROFILE`) or
/// removes a route class, or changes `identities.capacity` or the `anonymous` prefixes
/// (`TG_RESULT_RELOAD_REFUSED`). Class numbers from `tg_route_class` stay valid; a class the new
/// profile adds gets the next number. Each bucket keeps its state, clamped to the new size.
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
    ffi_panic_boundary! {
        let body = || {
                // SAFETY: 1. `limiter` is NULL or live during this call (caller's contract);
                // it is only borrowed shared, so concurrent admits are fine.
                let handle = unsafe { tg_limiter::borrow(limiter) }?;
                // SAFETY: 1. `yaml` is valid for `len` bytes during this call (caller's
                // contract).
                let yaml = unsafe { str_arg(yaml, len) }?;
                let profile = Profile::from_yaml(yaml)
                    .map_err(|e| Detail::profile(tg_result::InvalidProfile, &e))?;
                let mut interned = handle.interned.lock().unwrap_or_else(|e| e.into_inner());
                reload_limiter(&handle.limiter, profile)?;
                handle.publish(&mut interned);
                Ok(())
        };
        // SAFETY: 1. `err` is NULL or valid for a write (caller's contract).
        unsafe { with_detail(err, body) }
    }
}

/// Writes the message of result code `result` to `buf` (at most `len` bytes, NUL included) and
/// its length without the NUL to `*out_n`. A buffer of `TG_ERROR_MESSAGE_CAPACITY` bytes is
/// always enough; a smaller one that cannot hold the message gives `TG_RESULT_BUFFER_TOO_SMALL`
/// and nothing written. Numbers that are no result code get a message too.
///
/// # Safety
/// `buf` is NULL or valid for writes of `len` bytes; `out_n` is NULL or valid for a write of
/// one `size_t`.
#[no_mangle]
pub unsafe extern "C" fn tg_error_message(
    result: u32,
    buf: *mut c_char,
    len: usize,
    out_n: *mut usize,
) -> tg_result {
    ffi_panic_boundary! {
        let buf = out_arg(buf)?;
        let out_n = out_arg(out_n)?;
        if len > isize::MAX as usize {
            return Err(tg_result::LengthOverflow);
        }
        let msg = tg_result::from_u32(result).map_or(UNKNOWN_RESULT_MESSAGE, tg_result::message);
        if msg.len() >= len {
            return Err(tg_result::BufferTooSmall);
        }
        // SAFETY: 1. `buf` is not NULL (checked) and valid for `len` bytes (caller's contract),
        // and `msg.len() + 1 <= len` (checked). 2. `msg` is a static string, so the two do not
        // overlap. 3. `out_n` is not NULL (checked) and valid for a write (caller's contract).
        unsafe {
            core::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), msg.len());
            buf.add(msg.len()).write(0);
            out_n.write(msg.len());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
