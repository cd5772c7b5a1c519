//! The response future: a named enum, so that no request allocates where the backend decides
//! at once (the embedded [`Limiter`](crate::Limiter)). Only a backend that waits (Redis) gets a
//! boxed future for its wait.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::sync::Arc;

use ::http::header::HeaderValue;
use ::http::{Request, Response};
use ::tower::Service;

use super::held::Held;
use super::options::Options;
use super::outcome::RateLimitOutcome;
use super::refusal::{respond, RefusalBody, RefusalHook};
use super::state::{CompiledProfile, LayerState};
use crate::admission::Admission;
use crate::decision::Remaining;
use crate::http::{
    is_grpc, Answer, Caller, Policy, Quota, RequestId, RouteEntry, RATELIMIT, RATELIMIT_POLICY,
    X_REQUEST_ID,
};

/// What an admitted response gets on its way out: computed in `call`, written when the inner
/// service answers. Small (40 bytes: a pointer to the route's interned policy, the caller's
/// remaining tokens where the profile opts in, and a pointer to what the layer's options add),
/// so that moving it with the response future through an axum router's stack of futures costs
/// a few register moves, not a `memcpy`.
pub(super) struct Stamp {
    /// `RateLimit-Policy` (its clone copies a pointer) and the limits `RateLimit`'s `t` is
    /// computed from.
    policy: &'static Policy,
    /// The caller's own remaining tokens, for `RateLimit`, where the profile opts in (their
    /// `t` is computed when the header is written).
    remaining: Option<Remaining>,
    /// What the layer's options add, built only where one of them is on.
    extra: Option<Box<Extra>>,
}

// The size the doc above promises, kept by the compiler (on 64-bit targets; less elsewhere).
const _: () = assert!(core::mem::size_of::<Stamp>() <= 40);

/// What an admitted response gets from the layer's options (all off by default; each of them
/// allocates per request anyway, for its header values or its extension).
pub(super) struct Extra {
    /// `X-Request-Id`, where the layer was asked for ids on every response.
    request_id: Option<HeaderValue>,
    /// Where the layer was asked for the legacy `X-RateLimit-*` headers (sent with `RateLimit`).
    legacy: bool,
    /// Where the layer was asked for outcomes in responses.
    outcome: Option<RateLimitOutcome>,
}

impl Extra {
    /// Puts on an admitted `request` what the options ask for (its request id, its outcome)
    /// and returns what its response will need: `None`, with nothing built (not even the
    /// outcome), under the default options.
    #[inline]
    pub(super) fn for_request<B>(
        request: &mut Request<B>,
        options: Options,
        outcome: impl FnOnce() -> RateLimitOutcome,
    ) -> Option<Box<Extra>> {
        let Options {
            outcome_in_request,
            outcome_in_response,
            request_id_on_every_response,
            legacy_headers,
        } = options;
        if outcome_in_request
            || outcome_in_response
            || request_id_on_every_response
            || legacy_headers
        {
            Self::build(request, options, outcome())
        } else {
            None
        }
    }

    #[cold]
    fn build<B>(
        request: &mut Request<B>,
        options: Options,
        outcome: RateLimitOutcome,
    ) -> Option<Box<Extra>> {
        let request_id = options.request_id_on_every_response.then(|| {
            let id = RequestId::from_headers(request.headers());
            let value = id.header_value().clone();
            request.headers_mut().insert(X_REQUEST_ID, value.clone());
            value
        });
        if options.outcome_in_request {
            request.extensions_mut().insert(outcome);
        }
        let extra = Extra {
            request_id,
            legacy: options.legacy_headers,
            outcome: options.outcome_in_response.then_some(outcome),
        };
        // Only the outcome in the request: the response needs nothing.
        let needed = extra.request_id.is_some() || extra.legacy || extra.outcome.is_some();
        needed.then(|| Box::new(extra))
    }

    #[cold]
    fn write<B>(self, remaining: Option<Quota>, response: &mut Response<B>) {
        let headers = response.headers_mut();
        if let (true, Some(q)) = (self.legacy, remaining) {
            q.write_legacy(headers);
        }
        if let Some(id) = self.request_id {
            headers.insert(X_REQUEST_ID, id);
        }
        if let Some(o) = self.outcome {
            response.extensions_mut().insert(o);
        }
    }
}

impl Stamp {
    /// The stamp for a request admitted on `entry`'s route.
    #[inline]
    pub(super) fn new(
        entry: &RouteEntry,
        remaining: Option<Remaining>,
        extra: Option<Box<Extra>>,
    ) -> Stamp {
        Stamp {
            policy: entry.interned_policy(),
            remaining,
            extra,
        }
    }

    #[inline]
    fn write<B>(self, response: &mut Response<B>) {
        let headers = response.headers_mut();
        headers.insert(RATELIMIT_POLICY, self.policy.header.clone());
        let quota = self.remaining.map(|r| Quota::new(r, &self.policy.limits));
        if let Some(q) = &quota {
            headers.insert(RATELIMIT, q.header());
        }
        if let Some(extra) = self.extra {
            (*extra).write(quota, response);
        }
    }
}

/// A boxed future, for a backend that waits for its decision.
type Waiting<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

pin_project_lite::pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit): the inner service's future,
    /// passed through (unlimited route) or stamped with the rate-limit headers (admitted), or
    /// the layer's own refusal, ready at once. None of these allocates; a backend that waits
    /// for its decision (Redis) is the one case boxed.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        PassThrough { #[pin] inner: F },
        Admitted { #[pin] inner: F, stamp: Option<Stamp> },
        Refused { response: Option<Response<B>> },
        Waiting { future: Waiting<B, E> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(super) fn pass_through(inner: F) -> Self {
        ResponseFuture {
            kind: Kind::PassThrough { inner },
        }
    }
    pub(super) fn admitted(inner: F, stamp: Stamp) -> Self {
        ResponseFuture {
            kind: Kind::Admitted {
                inner,
                stamp: Some(stamp),
            },
        }
    }
    pub(super) fn refused(response: Response<B>) -> Self {
        ResponseFuture {
            kind: Kind::Refused {
                response: Some(response),
            },
        }
    }
    pub(super) fn waiting(future: Waiting<B, E>) -> Self {
        ResponseFuture {
            kind: Kind::Waiting { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::PassThrough { inner } => inner.poll(cx),
            KindProj::Admitted { inner, stamp } => {
                // Stamped where it lies: the response is not moved out of the `Poll` and back.
                let mut polled = inner.poll(cx);
                if let Poll::Ready(Ok(response)) = &mut polled {
                    if let Some(stamp) = stamp.take() {
                        stamp.write(response);
                    }
                }
                polled
            }
            KindProj::Refused { response } => Poll::Ready(Ok(response
                .take()
                .expect("a refused ResponseFuture polled after it answered"))),
            KindProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

/// Everything a request that waits for its backend carries into its future.
pub(super) struct Wait<A: 'static, X: 'static, M> {
    pub(super) state: Held<LayerState<A, X>>,
    pub(super) compiled: Arc<CompiledProfile>,
    pub(super) route: usize,
    pub(super) caller: Caller,
    pub(super) options: Options,
    pub(super) on_refusal: Option<RefusalHook>,
    pub(super) body: M,
}

/// Decides a request on a backend that waits (which `call` could not decide at once), and
/// answers the refusal or calls `inner` and adds the rate-limit headers to its response.
pub(super) async fn wait_and_respond<S, A, X, M, ReqBody, ResBody>(
    mut inner: S,
    mut request: Request<ReqBody>,
    wait: Wait<A, X, M>,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    A: Admission,
    M: RefusalBody<ResBody>,
{
    let Wait {
        state,
        compiled,
        route,
        caller,
        options,
        on_refusal,
        body,
    } = wait;
    let entry = compiled.routes.entry(route);
    let profile = &*compiled.profile;
    let key = caller.key(entry.class());
    let verdict = state.admission.evaluate(&key).await;
    compiled.record_sdk(request.headers(), verdict.computed.outcome());
    let remaining = if profile.expose_remaining {
        state.admission.remaining(&key).await
    } else {
        None
    };
    let outcome = RateLimitOutcome {
        decision: verdict.computed,
        class: entry.class(),
        enforced: !verdict.is_shadowed(),
    };
    if !verdict.decision.is_admit() {
        let request_id = RequestId::from_headers(request.headers());
        let answer = Answer::new(verdict.decision, profile, &request_id)
            .with_policy(entry.policy())
            .with_remaining(remaining, entry.limits());
        let grpc = is_grpc(request.headers());
        let mut refusal = respond(&answer, &request_id, on_refusal.as_ref(), grpc, &body);
        if options.outcome_in_response {
            refusal.extensions_mut().insert(outcome);
        }
        if options.legacy_headers {
            if let Some(r) = remaining {
                Quota::new(r, entry.limits()).write_legacy(refusal.headers_mut());
            }
        }
        return Ok(refusal);
    }
    let extra = Extra::for_request(&mut request, options, || outcome);
    let stamp = Stamp::new(entry, remaining, extra);
    let mut response = inner.call(request).await?;
    stamp.write(&mut response);
    Ok(response)
}
