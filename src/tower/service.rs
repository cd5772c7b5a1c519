//! The service: what happens before the response future, synchronously in `call` (route,
//! caller and, with a backend that decides at once, the decision and the refusal).

use ::http::{Request, Response};
use ::tower::Service;
use core::fmt;
use core::task::{Context, Poll};

use super::future::{wait_and_respond, Extra, ResponseFuture, Stamp, Wait};
use super::held::Held;
use super::options::Options;
use super::outcome::RateLimitOutcome;
use super::refusal::{respond, BodyFromBytes, RefusalBody, RefusalHook};
use super::state::LayerState;
use crate::admission::Admission;
use crate::http::{is_grpc, Answer, KeyExtractor, PeerExtractor, RequestId};

/// The service [`RateLimitLayer`](super::RateLimitLayer) wraps around `S`.
pub struct RateLimit<S, A: 'static, X: 'static = PeerExtractor, M = BodyFromBytes> {
    inner: S,
    /// Counted, or leaked by [`RateLimitLayer::leak`](super::RateLimitLayer::leak): axum clones
    /// this service for every request, and a counted state's clone writes its count.
    state: Held<LayerState<A, X>>,
    options: Options,
    on_refusal: Option<RefusalHook>,
    body: M,
}

impl<S, A, X, M> RateLimit<S, A, X, M> {
    pub(super) fn new(
        inner: S,
        state: Held<LayerState<A, X>>,
        options: Options,
        on_refusal: Option<RefusalHook>,
        body: M,
    ) -> Self {
        RateLimit {
            inner,
            state,
            options,
            on_refusal,
            body,
        }
    }
}

impl<S: Clone, A, X, M: Clone> Clone for RateLimit<S, A, X, M> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            state: self.state.clone(),
            options: self.options,
            on_refusal: self.on_refusal.clone(),
            body: self.body.clone(),
        }
    }
}

impl<S: fmt::Debug, A, X, M> fmt::Debug for RateLimit<S, A, X, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// What `call` found out before calling anyone.
enum Step<B, A: 'static, X: 'static, M> {
    /// No route matched: not limited.
    Unlimited,
    /// Admitted: call the inner service, then stamp its response (the request already has
    /// what the options put on it).
    Admitted(Stamp),
    /// Refused: the answer is ready (boxed, like the waiting case: both are off the admitted
    /// path, and a small `Step` is cheap to hand out of the thread-local cache).
    Refused(Box<Response<B>>),
    /// The backend waits for its decision.
    Wait(Box<Wait<A, X, M>>),
}

impl<S, A, X, M, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, A, X, M>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    A: Admission,
    X: KeyExtractor,
    M: RefusalBody<ResBody>,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let options = self.options;
        // Dereferenced once (counted or leaked is a branch), not at every field below.
        let held = &self.state;
        let state: &LayerState<A, X> = held;
        let on_refusal = self.on_refusal.as_ref();
        let body = &self.body;
        let step = state.with_compiled(|compiled| {
            let Some(route) = compiled
                .routes
                .position(request.method(), request.uri().path())
            else {
                return Step::Unlimited;
            };
            let entry = compiled.routes.entry(route);
            let profile = &*compiled.profile;
            let decided = state.extractor.with_key(&request, entry.class(), |key| {
                let verdict = state.admission.evaluate_now(key)?;
                let remaining = if profile.expose_remaining {
                    state.admission.remaining_now(key)
                } else {
                    None
                };
                Some((verdict, remaining))
            });
            let Some((verdict, remaining)) = decided else {
                return Step::Wait(Box::new(Wait {
                    state: held.clone(),
                    compiled: std::sync::Arc::clone(compiled),
                    route,
                    caller: state.extractor.caller(&request),
                    options,
                    on_refusal: on_refusal.cloned(),
                    body: body.clone(),
                }));
            };
            compiled.record_sdk(request.headers(), verdict.computed.outcome());
            // Built only where an option asks for it (or on a refusal, off the admitted path).
            let outcome = || RateLimitOutcome {
                decision: verdict.computed,
                class: entry.class(),
                enforced: !verdict.is_shadowed(),
            };
            if verdict.decision.is_admit() {
                let extra = Extra::for_request(&mut request, options, outcome);
                return Step::Admitted(Stamp::new(entry, remaining, extra));
            }
            refuse(
                &request,
                &verdict.decision,
                profile,
                entry,
                remaining,
                outcome(),
                options,
                on_refusal,
                body,
            )
        });
        match step {
            // Called here, in `call`, right after `poll_ready`: no clone of the inner service.
            Step::Unlimited => ResponseFuture::pass_through(self.inner.call(request)),
            Step::Admitted(stamp) => ResponseFuture::admitted(self.inner.call(request), stamp),
            Step::Refused(response) => ResponseFuture::refused(*response),
            Step::Wait(wait) => {
                // The inner service is called after the wait: the clone that was made ready
                // goes into the future, and a fresh clone stays for next time.
                let clone = self.inner.clone();
                let inner = core::mem::replace(&mut self.inner, clone);
                ResponseFuture::waiting(Box::pin(wait_and_respond(inner, request, *wait)))
            }
        }
    }
}

/// The refusal of `request`, with its request id (the caller's own when well-formed).
// Each argument is one thing `call` already has at hand; a struct for them would be built on
// the same cold path just to be taken apart.
#[allow(clippy::too_many_arguments)]
#[cold]
fn refuse<ReqBody, B, A, X, M: RefusalBody<B>>(
    request: &Request<ReqBody>,
    decision: &crate::Decision,
    profile: &crate::Profile,
    entry: &crate::http::RouteEntry,
    remaining: Option<crate::Remaining>,
    outcome: RateLimitOutcome,
    options: Options,
    on_refusal: Option<&RefusalHook>,
    body: &M,
) -> Step<B, A, X, M> {
    let request_id = RequestId::from_headers(request.headers());
    let answer = Answer::new(*decision, profile, &request_id)
        .with_policy(entry.policy())
        .with_remaining(remaining, entry.limits());
    let grpc = is_grpc(request.headers());
    let mut refusal = respond(&answer, &request_id, on_refusal, grpc, body);
    if options.outcome_in_response {
        refusal.extensions_mut().insert(outcome);
    }
    if options.legacy_headers {
        if let Some(r) = remaining {
            crate::http::Quota::new(r, entry.limits()).write_legacy(refusal.headers_mut());
        }
    }
    Step::Refused(Box::new(refusal))
}
