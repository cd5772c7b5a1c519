//! The service: what happens before the response future, synchronously in `call` (route,
//! request id, caller).

use core::fmt;
use core::task::{Context, Poll};
use std::sync::Arc;

use ::http::{Request, Response};
use ::tower::Service;

use super::future::{respond, ResponseFuture};
use super::state::LayerState;
use crate::admission::Admission;
use crate::http::{KeyExtractor, PeerExtractor, RequestId, X_REQUEST_ID};

/// The service [`RateLimitLayer`](super::RateLimitLayer) wraps around `S`.
pub struct RateLimit<S, A, X = PeerExtractor> {
    inner: S,
    state: Arc<LayerState<A, X>>,
}

impl<S, A, X> RateLimit<S, A, X> {
    pub(super) fn new(inner: S, state: Arc<LayerState<A, X>>) -> Self {
        RateLimit { inner, state }
    }
}

impl<S: Clone, A, X> Clone for RateLimit<S, A, X> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            state: Arc::clone(&self.state),
        }
    }
}

impl<S: fmt::Debug, A, X> fmt::Debug for RateLimit<S, A, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, A, X, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, A, X>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    A: Admission,
    X: KeyExtractor,
    ReqBody: Send + 'static,
    ResBody: From<Vec<u8>> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<Response<ResBody>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        // The clone that was made ready is the one to call; the fresh clone stays for next time.
        let clone = self.inner.clone();
        let mut inner = core::mem::replace(&mut self.inner, clone);
        let compiled = self.state.compiled();
        let Some(route) = compiled
            .routes
            .position(request.method(), request.uri().path())
        else {
            return Box::pin(inner.call(request));
        };
        let request_id = RequestId::from_headers(request.headers());
        request
            .headers_mut()
            .insert(X_REQUEST_ID, request_id.header_value().clone());
        let caller = self.state.extractor.caller(&request);
        let state = Arc::clone(&self.state);
        Box::pin(respond(
            inner, request, state, compiled, route, caller, request_id,
        ))
    }
}
