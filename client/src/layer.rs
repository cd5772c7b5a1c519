//! A tower layer that runs [`execute`] around any `Service<http::Request<B>>` whose body can be
//! cloned (hyper-util's legacy `Client` with `Full<Bytes>` or `String` bodies, for example).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::HeaderName;
use http::{HeaderValue, Request, Response};
use tower::{Layer, Service};

use super::budget::RetryBudget;
use super::call::{Call, IdempotencyKey};
use super::classify::{is_idempotent, send_state_from_io, SendState, TransportError};
use super::execute::execute;
use super::give_up::{GiveUp, Last, RetryError};
use super::policy::RetryPolicy;

/// The `Idempotency-Key` header (IETF httpapi draft), lower-case as HTTP/2 wants it.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Tells whether a service error means the request never left ([`SendState::NotSent`]).
pub trait SendStateOf<E> {
    /// How far the failed request got.
    fn send_state(&self, error: &E) -> SendState;
}

impl<E, F: Fn(&E) -> SendState> SendStateOf<E> for F {
    fn send_state(&self, error: &E) -> SendState {
        self(error)
    }
}

/// The default error reading: [`send_state_from_io`] over the error's `source()` chain.
#[derive(Clone, Copy, Debug, Default)]
pub struct IoSendState;

impl<E: std::error::Error + 'static> SendStateOf<E> for IoSendState {
    fn send_state(&self, error: &E) -> SendState {
        send_state_from_io(error)
    }
}

/// Wraps a service with the retry loop; see [`RetryService`].
#[derive(Clone, Debug)]
pub struct RetryLayer<C = IoSendState> {
    policy: RetryPolicy,
    budget: RetryBudget,
    generate_keys: bool,
    product_token: bool,
    send_state: C,
}

impl RetryLayer {
    /// One policy and one shared budget for every request through the layer.
    pub fn new(policy: RetryPolicy, budget: RetryBudget) -> Self {
        RetryLayer {
            policy,
            budget,
            generate_keys: false,
            product_token: true,
            send_state: IoSendState,
        }
    }
}

impl<C> RetryLayer<C> {
    /// Adds a generated `Idempotency-Key` to non-idempotent requests that have none, so POST
    /// and PATCH become retryable (only if the server honours the key).
    pub fn generate_idempotency_keys(mut self, yes: bool) -> Self {
        self.generate_keys = yes;
        self
    }

    /// Whether to add the SDK's [`PRODUCT_TOKEN`](crate::PRODUCT_TOKEN) to `User-Agent`
    /// (appended to the request's own, see [`user_agent`](crate::user_agent)). On by default:
    /// providers segment traffic by SDK version to tell a retry storm from growth.
    pub fn product_token(mut self, yes: bool) -> Self {
        self.product_token = yes;
        self
    }

    /// How to read the inner service's errors, e.g. for hyper-util's legacy client:
    /// `|e: &Error| if e.is_connect() { SendState::NotSent } else { SendState::SentNoResponse }`.
    pub fn send_state<C2>(self, send_state: C2) -> RetryLayer<C2> {
        RetryLayer {
            policy: self.policy,
            budget: self.budget,
            generate_keys: self.generate_keys,
            product_token: self.product_token,
            send_state,
        }
    }
}

impl<S, C: Clone> Layer<S> for RetryLayer<C> {
    type Service = RetryService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryService {
            inner,
            settings: Arc::new(RetrySettings {
                policy: self.policy.clone(),
                budget: self.budget.clone(),
                generate_keys: self.generate_keys,
                product_token: self.product_token,
                send_state: self.send_state.clone(),
            }),
        }
    }
}

/// What the layer was configured with, shared by every service it makes and every call.
#[derive(Debug)]
struct RetrySettings<C> {
    policy: RetryPolicy,
    budget: RetryBudget,
    generate_keys: bool,
    product_token: bool,
    send_state: C,
}

/// Retries `http::Request<B>` through a cloned inner service per attempt.
///
/// The answer is the last response whenever there is one, even when retries gave up on it (a
/// final 429 or 404 is the server's answer and the caller should see it); its extensions then
/// carry the [`GiveUp`] reason (read it with `response.extensions().get::<GiveUp>()`). Without a
/// response (transport error, timeout, no time for a first attempt) the error is the
/// [`RetryError`].
///
/// `poll_ready` is always ready: each attempt waits for readiness of its own clone of the inner
/// service, since a retry may come long after this service was polled.
#[derive(Clone, Debug)]
pub struct RetryService<S, C = IoSendState> {
    inner: S,
    settings: Arc<RetrySettings<C>>,
}

/// The future of [`RetryService::call`]: the whole retry loop of one logical request. Boxed,
/// since the loop awaits the inner service's futures and the waits, which have no name to put
/// in a type.
pub type RetryFuture<RB, E> =
    Pin<Box<dyn Future<Output = Result<Response<RB>, RetryError<Response<RB>, E>>> + Send>>;

impl<S, B, RB, C> Service<Request<B>> for RetryService<S, C>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    B: Clone + Send + Sync + 'static,
    RB: Send + 'static,
    C: SendStateOf<S::Error> + Send + Sync + 'static,
{
    type Response = Response<RB>;
    type Error = RetryError<Response<RB>, S::Error>;
    type Future = RetryFuture<RB, S::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let settings = Arc::clone(&self.settings);
        if settings.product_token {
            crate::user_agent::add_product_token(req.headers_mut());
        }
        let inner = self.inner.clone();
        Box::pin(async move {
            let had_key = req.headers().contains_key(&IDEMPOTENCY_KEY);
            let key = if had_key {
                // Its exact bytes stay in the header; the loop only needs to know it is there.
                IdempotencyKey::Given(Arc::from(""))
            } else if settings.generate_keys && !is_idempotent(req.method()) {
                IdempotencyKey::Generate
            } else {
                IdempotencyKey::None
            };
            let call = Call::new(req.method().clone()).with_key(key);
            let for_attempts = Arc::clone(&settings);
            // `move`: the closure owns the service and the request (Send, not necessarily Sync)
            // and hands each attempt its own clones.
            let result = execute(&settings.policy, &settings.budget, call, move |attempt| {
                let mut svc = inner.clone();
                let mut req = req.clone();
                if let (false, Some(k)) = (had_key, &attempt.idempotency_key) {
                    if let Ok(v) = HeaderValue::from_str(k) {
                        req.headers_mut().insert(IDEMPOTENCY_KEY, v);
                    }
                }
                let settings = Arc::clone(&for_attempts);
                async move {
                    let sent = async {
                        std::future::poll_fn(|cx| svc.poll_ready(cx)).await?;
                        svc.call(req).await
                    };
                    sent.await.map_err(|e| TransportError {
                        state: settings.send_state.send_state(&e),
                        error: e,
                    })
                }
            })
            .await;
            match result {
                Ok(resp) => Ok(resp),
                Err(err) => match err.last {
                    Some(Last::Response(mut resp)) => {
                        resp.extensions_mut().insert::<GiveUp>(err.reason);
                        Ok(resp)
                    }
                    last => Err(RetryError { last, ..err }),
                },
            }
        })
    }
}
