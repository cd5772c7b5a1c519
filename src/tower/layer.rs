//! The layer: configuration only (backend, extractor, options); the work is in the service.

use core::fmt;
use std::sync::Arc;

use ::tower::Layer;

use ::http::Response;

use super::held::Held;
use super::options::Options;
use super::refusal::{BodyFromBytes, RefusalBody, RefusalContext, RefusalFn, RefusalHook};
use super::service::RateLimit;
use super::state::LayerState;
use crate::admission::Admission;
use crate::http::{KeyExtractor, PeerExtractor};

/// Rate-limits a tower service; see the [module docs](super). `Clone` and cheap to clone: every
/// clone shares the backend and the compiled routes.
///
/// By default an admitted response gets `RateLimit-Policy` (and `RateLimit` where the profile
/// opts in) and nothing else: no request id and no [`RateLimitOutcome`](super::RateLimitOutcome)
/// in the extensions, so that an admitted request allocates nothing in the layer. A refusal
/// always carries a request id, in its `X-Request-Id` header and its body: the caller's own
/// when it sent one well-formed `X-Request-Id`, else a generated one. The methods below opt
/// into more.
///
/// A gRPC request (`content-type: application/grpc...`, see [`crate::http::is_grpc`]) is
/// refused with a gRPC status instead: `RESOURCE_EXHAUSTED` for 429, `UNAVAILABLE` for 503, with
/// `grpc-retry-pushback-ms`, as a trailers-only response. Over tonic's server
/// (`Server::builder().layer(..)`) give the layer tonic's body and peer address:
/// `.refusal_body(|b| tonic::body::Body::new(http_body_util::Full::new(bytes::Bytes::from(b))))`
/// and `PeerExtractor::new().peer_addr_from(|e| e.get::<TcpConnectInfo>()?.remote_addr())`.
// `'static`: what a `leak`ed state holds lives as long (every `Admission` and `KeyExtractor` is).
pub struct RateLimitLayer<A: 'static, X: 'static = PeerExtractor, M = BodyFromBytes> {
    state: Held<LayerState<A, X>>,
    options: Options,
    /// Kept out of the `Copy` options: the admitted path never touches its reference count.
    on_refusal: Option<RefusalHook>,
    body: M,
}

impl<A, X, M: Clone> Clone for RateLimitLayer<A, X, M> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            state: self.state.clone(),
            options: self.options,
            on_refusal: self.on_refusal.clone(),
            body: self.body.clone(),
        }
    }
}

impl<A, X, M> fmt::Debug for RateLimitLayer<A, X, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("options", &self.options)
            .field("on_refusal", &self.on_refusal.is_some())
            .finish_non_exhaustive()
    }
}

impl<A, X, M> RateLimitLayer<A, X, M> {
    /// Puts the [`RateLimitOutcome`](super::RateLimitOutcome) of every admitted request into
    /// its extensions, for handlers (e.g. to combine with their own limiter through
    /// [`crate::http::Combined`]). Costs an allocation per request where the request has no
    /// extensions yet.
    pub fn outcome_in_request(mut self) -> Self {
        self.options.outcome_in_request = true;
        self
    }

    /// Puts the [`RateLimitOutcome`](super::RateLimitOutcome) of every limited request into
    /// the response extensions (admitted, shadowed or refused), for telemetry layers outside
    /// this one.
    pub fn outcome_in_response(mut self) -> Self {
        self.options.outcome_in_response = true;
        self
    }

    /// Gives every limited request an id, not only refusals: the caller's well-formed
    /// `X-Request-Id`, or else a generated one that replaces what it sent, put on the request
    /// (so that handlers log the same id) and echoed in the response's `X-Request-Id`.
    /// Requests that match no route stay untouched either way.
    pub fn request_id_on_every_response(mut self) -> Self {
        self.options.request_id_on_every_response = true;
        self
    }

    /// Also sends the legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` (seconds until full) for older clients that do not read `RateLimit`,
    /// describing the caller's own tightest bucket (the one with fewer tokens left). Off by
    /// default; like `RateLimit`, sent only where the profile's `expose_remaining` is true, so
    /// that the operator's choice about showing remaining tokens holds either way.
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.options.legacy_headers = on;
        self
    }

    /// Shapes refusals: `hook` gets the [`RefusalContext`] (decision, `Retry-After` seconds,
    /// request id) and returns the response to send (status, headers, body), or `None` for
    /// tollgate's own problem response. Tollgate then writes its rate-limit headers over the
    /// hook's (`Retry-After`, `X-Request-Id`, `Cache-Control: no-store`, `RateLimit-Policy`),
    /// so a client's back-off works whatever the body says. Runs only on refusals, and not on
    /// those of gRPC requests, which always get the gRPC status (a gRPC client reads no body).
    pub fn on_refusal<F>(mut self, hook: F) -> Self
    where
        F: Fn(&RefusalContext<'_>) -> Option<Response<Vec<u8>>> + Send + Sync + 'static,
    {
        let hook: Arc<RefusalFn> = Arc::new(hook);
        let hook = Held::Counted(hook);
        // After `leak`, the hook is leaked too: every service clone carries it.
        self.on_refusal = Some(if self.state.is_leaked() {
            hook.leak()
        } else {
            hook
        });
        self
    }

    /// Keeps the layer's state (the backend, the extractor, the compiled routes, the refusal
    /// hook) for the rest of the process, so that a service clone copies a pointer instead of
    /// counting a reference: for a layer built once per process.
    ///
    /// axum clones a route's service for every request, so by default every request increments
    /// and decrements one shared reference count, a cache line that every core serving requests
    /// writes and then waits to get back from the others (see `benches/http_layer.rs`, group
    /// `http_layer_two_threads`). After `leak` nothing shared is written but the caller's own
    /// bucket and its shard's counter. The price: the state is never freed, nor the backend it
    /// holds (with an `Arc<Limiter>`, one reference that keeps the limiter and its table alive)
    /// — each call leaks one. Code that builds layers repeatedly (tests, a router rebuilt on
    /// every reload: reloading the [`Limiter`](crate::Limiter) itself needs no new layer) should
    /// keep the default. Clones made before `leak` keep counting, and share the same state.
    pub fn leak(mut self) -> Self {
        self.state = self.state.leak();
        self.on_refusal = self.on_refusal.map(Held::leak);
        self
    }

    /// Makes the bodies of refusals with `make` (see [`RefusalBody`]): for a service whose body
    /// type is not `From<Vec<u8>>`, such as tonic's.
    pub fn refusal_body<B, N: RefusalBody<B>>(self, make: N) -> RateLimitLayer<A, X, N> {
        RateLimitLayer {
            state: self.state,
            options: self.options,
            on_refusal: self.on_refusal,
            body: make,
        }
    }

    /// The backend.
    pub fn admission(&self) -> &A {
        &self.state.admission
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
            state: Held::Counted(Arc::new(LayerState::new(admission, extractor))),
            options: Options::default(),
            on_refusal: None,
            body: BodyFromBytes,
        }
    }
}

impl<S, A, X, M: Clone> Layer<S> for RateLimitLayer<A, X, M> {
    type Service = RateLimit<S, A, X, M>;
    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(
            inner,
            self.state.clone(),
            self.options,
            self.on_refusal.clone(),
            self.body.clone(),
        )
    }
}
