//! What the layer and every service it made share: the backend, the extractor, and the routes
//! compiled for the profile in force, recompiled only after a reload.

use std::sync::Arc;

use parking_lot::RwLock;

use crate::admission::Admission;
use crate::http::RouteTable;
use crate::profile::Profile;

/// A profile and its routes, compiled together: a future holds both through one `Arc`, so a
/// reload in the middle of a request cannot pair one profile's routes with another's limits.
pub(super) struct CompiledProfile {
    pub(super) profile: Arc<Profile>,
    pub(super) routes: RouteTable,
}

/// The state behind every clone of a [`RateLimitLayer`](super::RateLimitLayer) and of the
/// [`RateLimit`](super::RateLimit) services it makes.
pub(super) struct LayerState<A, X> {
    pub(super) admission: A,
    pub(super) extractor: X,
    compiled: RwLock<Arc<CompiledProfile>>,
}

impl<A: Admission, X> LayerState<A, X> {
    pub(super) fn new(admission: A, extractor: X) -> Self {
        let compiled = Self::compile(&admission, admission.profile());
        LayerState {
            admission,
            extractor,
            compiled: RwLock::new(compiled),
        }
    }

    fn compile(admission: &A, profile: Arc<Profile>) -> Arc<CompiledProfile> {
        let routes = RouteTable::compile(&profile, |n| admission.route_class(n));
        Arc::new(CompiledProfile { profile, routes })
    }

    /// The compiled routes of the profile in force, recompiled only after a reload.
    pub(super) fn compiled(&self) -> Arc<CompiledProfile> {
        let profile = self.admission.profile();
        let current = self.compiled.read().clone();
        if Arc::ptr_eq(&current.profile, &profile) {
            return current;
        }
        self.recompile(profile)
    }

    #[cold]
    fn recompile(&self, profile: Arc<Profile>) -> Arc<CompiledProfile> {
        let fresh = Self::compile(&self.admission, profile);
        *self.compiled.write() = Arc::clone(&fresh);
        fresh
    }
}
