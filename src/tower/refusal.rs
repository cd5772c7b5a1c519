//! The refusal: the hook that lets the user shape the 429/503 while tollgate keeps the decision,
//! the `Retry-After` and the request id; the gRPC status for gRPC requests; and how the body of
//! a refusal is made for the service's body type.

use ::http::Response;

use super::held::Held;

use crate::decision::Decision;
use crate::http::{Answer, RequestId};

/// What a refusal hook is told (see [`RateLimitLayer::on_refusal`](super::RateLimitLayer::on_refusal)).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RefusalContext<'a> {
    /// The refusal: [`Decision::Throttle`] (429 by default) or [`Decision::Unavailable`] (503).
    pub decision: Decision,
    /// The `Retry-After` seconds tollgate sends (`None` where it is omitted).
    pub retry_after_secs: Option<u64>,
    /// The request id tollgate sends in `X-Request-Id`.
    pub request_id: &'a RequestId,
}

/// A refusal hook: `None` keeps tollgate's own response. Held like the layer's state (counted,
/// or leaked with it), since every service clone carries it.
pub(super) type RefusalHook = Held<RefusalFn>;

/// What [`RateLimitLayer::on_refusal`](super::RateLimitLayer::on_refusal) is given.
pub(super) type RefusalFn = dyn Fn(&RefusalContext<'_>) -> Option<Response<Vec<u8>>> + Send + Sync;

/// How the layer makes the body of its own refusals for a service whose body type is `B`.
///
/// The default, [`BodyFromBytes`], fits every body that is `From<Vec<u8>>` (axum's `Body`,
/// `Full<Bytes>`, `Vec<u8>`). A body type without that conversion
/// (tonic's `tonic::body::Body`) gets a function through
/// [`RateLimitLayer::refusal_body`](super::RateLimitLayer::refusal_body), e.g.
/// `|bytes| tonic::body::Body::new(http_body_util::Full::new(bytes::Bytes::from(bytes)))`.
/// Called only on refusals (a gRPC refusal's body is empty).
pub trait RefusalBody<B>: Clone + Send + Sync + 'static {
    /// The body holding `bytes`.
    fn refusal_body(&self, bytes: Vec<u8>) -> B;
}

/// The default [`RefusalBody`]: `B::from(bytes)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct BodyFromBytes;

impl<B: From<Vec<u8>>> RefusalBody<B> for BodyFromBytes {
    fn refusal_body(&self, bytes: Vec<u8>) -> B {
        B::from(bytes)
    }
}

impl<B, F> RefusalBody<B> for F
where
    F: Fn(Vec<u8>) -> B + Clone + Send + Sync + 'static,
{
    fn refusal_body(&self, bytes: Vec<u8>) -> B {
        self(bytes)
    }
}

/// The refusal for `answer`: for a gRPC request (`grpc`), the gRPC status as a trailers-only
/// response; else the hook's response where it gives one, with tollgate's rate-limit headers
/// written over it (so `Retry-After`, `X-Request-Id` and `Cache-Control: no-store` stay
/// whatever the hook did), else the default problem response.
#[cold]
pub(super) fn respond<B>(
    answer: &Answer<'_>,
    request_id: &RequestId,
    hook: Option<&RefusalHook>,
    grpc: bool,
    body: &impl RefusalBody<B>,
) -> Response<B> {
    if grpc {
        return answer
            .grpc_refusal::<Vec<u8>>()
            .expect("not an admit")
            .map(|empty| body.refusal_body(empty));
    }
    if let Some(hook) = hook {
        let cx = RefusalContext {
            decision: answer.decision(),
            retry_after_secs: answer.retry_after_secs(),
            request_id,
        };
        if let Some(custom) = hook(&cx) {
            let mut custom = custom.map(|b| body.refusal_body(b));
            answer.write_headers(custom.headers_mut());
            return custom;
        }
    }
    answer
        .refusal::<Vec<u8>>()
        .expect("not an admit")
        .map(|b| body.refusal_body(b))
}
