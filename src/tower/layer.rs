//! The layer: configuration only (backend and extractor); the work is in the service.

use core::fmt;
use std::sync::Arc;

use ::tower::Layer;

use super::service::RateLimit;
use super::state::LayerState;
use crate::admission::Admission;
use crate::http::{KeyExtractor, PeerExtractor};

/// Rate-limits a tower service; see the [module docs](super). `Clone` and cheap to clone: every
/// clone shares the backend and the compiled routes.
pub struct RateLimitLayer<A, X = PeerExtractor> {
    state: Arc<LayerState<A, X>>,
}

impl<A, X> Clone for RateLimitLayer<A, X> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            state: Arc::clone(&self.state),
        }
    }
}

impl<A, X> fmt::Debug for RateLimitLayer<A, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer").finish_non_exhaustive()
    }
}

impl<A: Admission> RateLimitLayer<A, PeerExtractor> {
    /// A layer over `admission` with the default [`PeerExtractor`] (no trusted proxies, peer
    /// address from a `SocketAddr` request extension).
    pub fn new(admission: A) -> Self {
        RateLimitLayer::with_extractor(admission, PeerExtractor::new())
    }
}

impl<A: Admission, X: KeyExtractor> RateLimitLayer<A, X> {
    /// A layer over `admission` that finds callers with `extractor`.
    pub fn with_extractor(admission: A, extractor: X) -> Self {
        RateLimitLayer {
            state: Arc::new(LayerState::new(admission, extractor)),
        }
    }

    /// The backend.
    pub fn admission(&self) -> &A {
        &self.state.admission
    }
}

impl<S, A, X> Layer<S> for RateLimitLayer<A, X> {
    type Service = RateLimit<S, A, X>;
    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, Arc::clone(&self.state))
    }
}
