//! What every limiter of the crate offers a server middleware: the embedded [`Limiter`] answers
//! at once, the Redis backend (`redis` feature) after one round trip. The tower layer
//! (`tower` feature) works with either through this trait.

use core::future::Future;
use std::sync::Arc;

use crate::decision::Decision;
use crate::decision::Remaining;
use crate::engine::Verdict;
use crate::identity::{Key, RouteClass};
use crate::limiter::{Limiter, Refused};
use crate::profile::Profile;

/// An admission engine: resolve a route class once, then decide each request.
///
/// With the trait in scope, `arc_limiter.admit(&key)` on an `Arc<Limiter>` resolves to this
/// trait's async method (the `Arc` impl comes first in method lookup); write
/// `Limiter::admit(&arc_limiter, &key)` there for the plain decision.
pub trait Admission: Send + Sync + 'static {
    /// The handle of a route class, or `None` if the profile has no such class.
    fn route_class(&self, name: &str) -> Option<RouteClass>;
    /// The profile in force (a snapshot; a middleware recompiles its routes when it changes).
    fn profile(&self) -> Arc<Profile>;
    /// A number that changes whenever the profile in force does (every reload), so that a
    /// middleware can keep what it derived from the profile (compiled routes) and notice a
    /// reload by one load of a word no request writes. `None` (the default) where the backend
    /// keeps none: the middleware then compares [`Admission::profile`] snapshots per request.
    #[inline]
    fn generation(&self) -> Option<u64> {
        None
    }
    /// Decides one request and charges it if admitted.
    fn admit(&self, key: &Key<'_>) -> impl Future<Output = Decision> + Send;
    /// Decides one request of weighted cost `n` and charges it if admitted: `n` tokens of both
    /// buckets and `n` shard slots, all or nothing. `n = 0` checks without charging; a cost
    /// larger than a bucket holds is [`Decision::Exceeds`]. See [`Limiter::admit_n`].
    fn admit_n(&self, key: &Key<'_>, n: u32) -> impl Future<Output = Decision> + Send;
    /// Admits every `(key, n)` in order, or none: at the first refusal, what the items before
    /// it were charged is given back exactly. See [`Limiter::admit_all`]. Required rather than
    /// provided: giving back exactly needs what the backend recorded of each charge (the
    /// capacity window it was counted in), which [`Admission::admit_n`] does not return.
    fn admit_all(
        &self,
        items: &[(Key<'_>, u32)],
    ) -> impl Future<Output = Result<(), Refused>> + Send;
    /// [`Admission::admit`], also telling what the profile computed when shadow mode let a
    /// refused request through. The default is for backends without shadow mode.
    fn evaluate(&self, key: &Key<'_>) -> impl Future<Output = Verdict> + Send {
        let decision = self.admit(key);
        async move {
            let decision = decision.await;
            Verdict {
                decision,
                computed: decision,
            }
        }
    }
    /// [`Admission::evaluate`] answered synchronously, for a backend that decides without
    /// waiting (the embedded [`Limiter`]): a middleware then needs no future of its own for
    /// the decision. `None` (the default) sends the middleware to [`Admission::evaluate`];
    /// a backend that returns `None` here must not have charged anything.
    #[inline]
    fn evaluate_now(&self, key: &Key<'_>) -> Option<Verdict> {
        let _ = key;
        None
    }
    /// [`Admission::remaining`] answered synchronously, asked only after
    /// [`Admission::evaluate_now`] answered (and only when the profile's `expose_remaining` is
    /// true). The default, `None`, leaves the `RateLimit` header out.
    #[inline]
    fn remaining_now(&self, key: &Key<'_>) -> Option<Remaining> {
        let _ = key;
        None
    }
    /// The caller's own remaining tokens, charging nothing (asked only when the profile's
    /// `expose_remaining` is true); `None` where the backend cannot tell without a round trip
    /// of its own, and the `RateLimit` header is then left out.
    fn remaining(&self, key: &Key<'_>) -> impl Future<Output = Option<Remaining>> + Send {
        let _ = key;
        core::future::ready(None)
    }
}

impl Admission for Limiter {
    fn route_class(&self, name: &str) -> Option<RouteClass> {
        Limiter::route_class(self, name)
    }
    fn profile(&self) -> Arc<Profile> {
        Limiter::profile(self)
    }
    #[inline]
    fn generation(&self) -> Option<u64> {
        Some(Limiter::generation(self))
    }
    #[inline]
    fn evaluate_now(&self, key: &Key<'_>) -> Option<Verdict> {
        Some(Limiter::evaluate(self, key))
    }
    #[inline]
    fn remaining_now(&self, key: &Key<'_>) -> Option<Remaining> {
        Some(Limiter::remaining(self, key))
    }
    /// Decided before the future is returned: it is ready at once.
    #[inline]
    fn admit(&self, key: &Key<'_>) -> impl Future<Output = Decision> + Send {
        core::future::ready(Limiter::admit(self, key))
    }
    #[inline]
    fn evaluate(&self, key: &Key<'_>) -> impl Future<Output = Verdict> + Send {
        core::future::ready(Limiter::evaluate(self, key))
    }
    #[inline]
    fn admit_n(&self, key: &Key<'_>, n: u32) -> impl Future<Output = Decision> + Send {
        core::future::ready(Limiter::admit_n(self, key, n))
    }
    fn admit_all(
        &self,
        items: &[(Key<'_>, u32)],
    ) -> impl Future<Output = Result<(), Refused>> + Send {
        core::future::ready(Limiter::admit_all(self, items))
    }
    fn remaining(&self, key: &Key<'_>) -> impl Future<Output = Option<Remaining>> + Send {
        core::future::ready(Some(Limiter::remaining(self, key)))
    }
}

impl<T: Admission> Admission for Arc<T> {
    fn route_class(&self, name: &str) -> Option<RouteClass> {
        (**self).route_class(name)
    }
    fn profile(&self) -> Arc<Profile> {
        (**self).profile()
    }
    #[inline]
    fn generation(&self) -> Option<u64> {
        (**self).generation()
    }
    #[inline]
    fn evaluate_now(&self, key: &Key<'_>) -> Option<Verdict> {
        (**self).evaluate_now(key)
    }
    #[inline]
    fn remaining_now(&self, key: &Key<'_>) -> Option<Remaining> {
        (**self).remaining_now(key)
    }
    #[inline]
    fn admit(&self, key: &Key<'_>) -> impl Future<Output = Decision> + Send {
        (**self).admit(key)
    }
    #[inline]
    fn evaluate(&self, key: &Key<'_>) -> impl Future<Output = Verdict> + Send {
        (**self).evaluate(key)
    }
    #[inline]
    fn admit_n(&self, key: &Key<'_>, n: u32) -> impl Future<Output = Decision> + Send {
        (**self).admit_n(key, n)
    }
    fn admit_all(
        &self,
        items: &[(Key<'_>, u32)],
    ) -> impl Future<Output = Result<(), Refused>> + Send {
        (**self).admit_all(items)
    }
    fn remaining(&self, key: &Key<'_>) -> impl Future<Output = Option<Remaining>> + Send {
        (**self).remaining(key)
    }
}
