//! What the layer and every service it made share: the backend, the extractor, and the routes
//! compiled for the profile in force, recompiled only after a reload.
//!
//! A request reads the compiled routes without writing anything shared: each thread keeps the
//! routes of the last few layers it served, tagged with the backend's
//! [`generation`](crate::Admission::generation), and a request only loads that word (which no
//! request writes) to know its copy is current. A reload changes the generation and sends each
//! thread, once, to the shared copy behind a lock. A backend without a generation gets the
//! shared copy per request, found current by comparing profile snapshots.

use core::cell::RefCell;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::admission::Admission;
use crate::http::RouteTable;
use crate::profile::Profile;
use crate::sync::unmodelled::{AtomicU64, Ordering};

/// A profile and its routes, compiled together: a future holds both through one `Arc`, so a
/// reload in the middle of a request cannot pair one profile's routes with another's limits.
pub(super) struct CompiledProfile {
    pub(super) profile: Arc<Profile>,
    pub(super) routes: RouteTable,
    /// `tollgate_sdk_decisions_total`, where the profile lists SDK versions.
    #[cfg(feature = "metrics")]
    pub(super) sdk: Option<super::sdk::SdkCounters>,
    /// The backend's generation the profile was read at (`None`: the backend has none).
    generation: Option<u64>,
}

/// Layers whose routes one thread keeps.
const CACHED: usize = 4;

/// One thread's compiled routes: (layer id, generation, routes), most recently filled first.
type Cache = [Option<(u64, u64, Arc<CompiledProfile>)>; CACHED];

std::thread_local! {
    static CACHE: RefCell<Cache> = const { RefCell::new([None, None, None, None]) };
}

/// The state behind every clone of a [`RateLimitLayer`](super::RateLimitLayer) and of the
/// [`RateLimit`](super::RateLimit) services it makes.
pub(super) struct LayerState<A, X> {
    pub(super) admission: A,
    pub(super) extractor: X,
    /// Process-unique: the key of this layer's routes in the threads' caches.
    id: u64,
    compiled: RwLock<Arc<CompiledProfile>>,
}

impl CompiledProfile {
    /// Counts a decision by the request's SDK label, where the profile lists SDK versions
    /// (one branch otherwise: `User-Agent` is not read).
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(super) fn record_sdk(&self, headers: &::http::HeaderMap, outcome: crate::Outcome) {
        #[cfg(feature = "metrics")]
        if let Some(sdk) = &self.sdk {
            sdk.record(headers, outcome);
        }
    }
}

impl<A: Admission, X> LayerState<A, X> {
    pub(super) fn new(admission: A, extractor: X) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let compiled = Self::compile(&admission);
        LayerState {
            admission,
            extractor,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            compiled: RwLock::new(compiled),
        }
    }

    /// Compiles the profile in force, tagged with the generation read before it.
    fn compile(admission: &A) -> Arc<CompiledProfile> {
        let generation = admission.generation();
        let profile = admission.profile();
        let routes = RouteTable::compile(&profile, |n| admission.route_class(n));
        Arc::new(CompiledProfile {
            #[cfg(feature = "metrics")]
            sdk: super::sdk::SdkCounters::new(&profile),
            profile,
            routes,
            generation,
        })
    }

    /// Runs `f` on the compiled routes of the profile in force, recompiled only after a
    /// reload. With a backend generation, the common case writes nothing shared.
    #[inline]
    pub(super) fn with_compiled<R>(&self, f: impl FnOnce(&Arc<CompiledProfile>) -> R) -> R {
        let Some(generation) = self.admission.generation() else {
            return f(&self.compiled_by_profile());
        };
        let mut f = Some(f);
        let cached = CACHE.try_with(|cache| {
            // Busy only if `f` itself went through a layer on this thread: use the shared copy.
            let mut cache = cache.try_borrow_mut().ok()?;
            // Most often this layer's routes are the first entry (a thread serving one layer).
            let first = matches!(&cache[0], Some((id, g, _)) if *id == self.id && *g == generation);
            let i = if first {
                0
            } else {
                self.find_or_refill(&mut cache, generation)
            };
            let compiled = &cache[i].as_ref()?.2;
            let f = f.take()?;
            Some(f(compiled))
        });
        match (cached, f) {
            (Ok(Some(r)), _) => r,
            (_, Some(f)) => f(&self.shared(Some(generation))),
            (_, None) => unreachable!("`f` ran only if the cache answered"),
        }
    }

    /// The place of this layer's routes for `generation` in the thread's cache, after the
    /// first: found, or put there.
    #[cold]
    fn find_or_refill(&self, cache: &mut Cache, generation: u64) -> usize {
        let hit = cache
            .iter()
            .position(|e| matches!(e, Some((id, g, _)) if *id == self.id && *g == generation));
        hit.unwrap_or_else(|| self.refill(cache, generation))
    }

    /// Puts this layer's routes for `generation` in the thread's cache; returns their place.
    #[cold]
    fn refill(&self, cache: &mut Cache, generation: u64) -> usize {
        let fresh = self.shared(Some(generation));
        let i = cache
            .iter()
            .position(|e| matches!(e, Some((id, ..)) if *id == self.id))
            .unwrap_or(CACHED - 1);
        cache[..=i].rotate_right(1);
        cache[0] = Some((self.id, fresh.generation.unwrap_or(generation), fresh));
        0
    }

    /// The shared copy, recompiled if it is older than `generation`.
    #[cold]
    fn shared(&self, generation: Option<u64>) -> Arc<CompiledProfile> {
        let current = self.compiled.read().clone();
        if current.generation >= generation {
            return current;
        }
        let fresh = Self::compile(&self.admission);
        let mut shared = self.compiled.write();
        if shared.generation < fresh.generation {
            *shared = Arc::clone(&fresh);
        }
        fresh
    }

    /// For a backend without a generation: the shared copy, recompiled when the profile
    /// snapshot is not the one it was compiled from.
    fn compiled_by_profile(&self) -> Arc<CompiledProfile> {
        let profile = self.admission.profile();
        let current = self.compiled.read().clone();
        if Arc::ptr_eq(&current.profile, &profile) {
            return current;
        }
        self.recompile(profile)
    }

    #[cold]
    fn recompile(&self, profile: Arc<Profile>) -> Arc<CompiledProfile> {
        let routes = RouteTable::compile(&profile, |n| self.admission.route_class(n));
        let fresh = Arc::new(CompiledProfile {
            #[cfg(feature = "metrics")]
            sdk: super::sdk::SdkCounters::new(&profile),
            profile,
            routes,
            generation: None,
        });
        *self.compiled.write() = Arc::clone(&fresh);
        fresh
    }
}
