//! The panic boundary: every `extern "C"` body runs inside [`panic_boundary`], so that no panic
//! unwinds into C.
//!
//! What a body returns, and what the function returns when the body panics, both follow from
//! the function's C return type, through [`Boundary`].

use core::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::tg_result;

/// A C return type, and how a body of an `extern "C"` function makes one.
pub(crate) trait Boundary: Sized {
    /// What the body returns: for a `tg_result`, a `Result<(), tg_result>`, so that `?` works.
    type Body;
    /// What the function returns when the body panicked.
    const ON_PANIC: Self;
    /// What the function returns when the body returned `body`.
    fn finish(body: Self::Body) -> Self;
}

impl Boundary for tg_result {
    type Body = Result<(), tg_result>;
    const ON_PANIC: Self = tg_result::Panic;

    #[inline]
    fn finish(body: Self::Body) -> Self {
        match body {
            Ok(()) => tg_result::Ok,
            Err(e) => e,
        }
    }
}

/// A function that returns nothing (`tg_limiter_free`) swallows the panic.
impl Boundary for () {
    type Body = ();
    const ON_PANIC: Self = ();

    #[inline]
    fn finish(body: Self::Body) -> Self {
        body
    }
}

/// A string (`tg_version`) is NULL after a panic.
impl Boundary for *const c_char {
    type Body = *const c_char;
    const ON_PANIC: Self = core::ptr::null();

    #[inline]
    fn finish(body: Self::Body) -> Self {
        body
    }
}

/// Runs `body`, catching a panic: the C return value is `R::finish` of what the body returned,
/// or `R::ON_PANIC` (`TG_RESULT_PANIC` for a `tg_result`) if it panicked.
///
/// `AssertUnwindSafe`: a body only reads its arguments and shares the limiter; after a panic
/// the caller is told it hit a bug, and the one lock a body takes ignores poisoning (see
/// `Handle::interned`).
#[inline]
pub(crate) fn panic_boundary<R: Boundary>(body: impl FnOnce() -> R::Body) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => R::finish(v),
        Err(_) => R::ON_PANIC,
    }
}
