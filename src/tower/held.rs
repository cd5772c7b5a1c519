//! How a layer's services hold what they share: counted (an `Arc`, the default) or leaked for
//! the life of the process (see [`RateLimitLayer::leak`](super::RateLimitLayer::leak)).
//!
//! Why there is a choice: axum clones a route's service for every request (`Route::oneshot_inner`
//! in axum 0.8), so a service that holds an `Arc` increments and decrements its count once per
//! request. That count is one cache line every core writes, and it shares its line with the
//! fields each request reads next (the backend, the extractor), so two cores serving requests
//! take turns owning it. A `&'static` reference is copied instead: nothing is written. Its price
//! is that what it points to is never freed, which suits a layer built once per process and
//! would leak one backend (a `Limiter` and its table) for every layer built by code that builds
//! layers repeatedly (tests, a router rebuilt on reload); hence the opt-in, and the count by
//! default. Counting per core instead (Linux's `percpu_ref`) avoids both only with an owner
//! that switches the count back to one word before it can see zero, and a `Clone` service has
//! no such owner; per-thread counts that stay alive between requests (so that a request does not
//! take its thread's count from zero and back, which writes a shared word again) would keep
//! every state alive until each thread that served it lets go, a leak of another shape.

use core::ops::Deref;
use std::sync::Arc;

/// A `T` shared by every clone: counted, or leaked (a clone copies a pointer).
pub(super) enum Held<T: ?Sized + 'static> {
    /// Freed when the last clone goes; every clone writes the count.
    Counted(Arc<T>),
    /// Never freed; a clone writes nothing.
    Leaked(&'static T),
}

impl<T: ?Sized + 'static> Held<T> {
    /// The same `T`, leaked: it lives for the rest of the process, whoever still counts it.
    pub(super) fn leak(self) -> Held<T> {
        match self {
            // The `Arc` itself is leaked (one pointer in a box): no `unsafe`, and `T` stays
            // where it is, so clones made before (still counting) and after share it.
            Held::Counted(arc) => Held::Leaked(&**Box::leak(Box::new(arc))),
            leaked => leaked,
        }
    }

    /// Whether [`Held::leak`] made this.
    pub(super) fn is_leaked(&self) -> bool {
        matches!(self, Held::Leaked(_))
    }
}

impl<T: ?Sized + 'static> Clone for Held<T> {
    #[inline]
    fn clone(&self) -> Self {
        match self {
            Held::Counted(arc) => Held::Counted(Arc::clone(arc)),
            Held::Leaked(r) => Held::Leaked(r),
        }
    }
}

impl<T: ?Sized + 'static> Deref for Held<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match self {
            Held::Counted(arc) => arc,
            Held::Leaked(r) => r,
        }
    }
}
