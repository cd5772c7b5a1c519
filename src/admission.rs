//! What every limiter of the crate offers a server middleware: the embedded [`Limiter`] answers
//! at once, the Redis backend (`redis` feature) after one round trip.

use core::future::Future;
use std::sync::Arc;

use crate::decision::Decision;
use crate::identity::{Key, RouteClass};
use crate::limiter::Limiter;
use crate::profile::Profile;

/// An admission engine: resolve a route class once, then decide each request.
pub trait Admission: Send + Sync {
    /// The handle of a route class, or `None` if the profile has no such class.
    fn route_class(&self, name: &str) -> Option<RouteClass>;
    /// The profile in force (a snapshot).
    fn profile(&self) -> Arc<Profile>;
    /// Decides one request and charges it if admitted.
    fn admit(&self, key: &Key<'_>) -> impl Future<Output = Decision> + Send;
}

impl Admission for Limiter {
    fn route_class(&self, name: &str) -> Option<RouteClass> {
        Limiter::route_class(self, name)
    }

    fn profile(&self) -> Arc<Profile> {
        Limiter::profile(self)
    }

    /// Decided before the future is returned: it is ready at once.
    fn admit(&self, key: &Key<'_>) -> impl Future<Output = Decision> + Send {
        core::future::ready(Limiter::admit(self, key))
    }
}
