//! The refusal hook: lets the user shape the 429/503 while tollgate keeps the decision, the
//! `Retry-After` and the request id.

use std::sync::Arc;

use ::http::Response;

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

/// A refusal hook: `None` keeps tollgate's own response.
pub(super) type RefusalHook =
    Arc<dyn Fn(&RefusalContext<'_>) -> Option<Response<Vec<u8>>> + Send + Sync>;

/// The refusal for `answer`: the hook's response where it gives one, with tollgate's rate-limit
/// headers written over it (so `Retry-After`, `X-Request-Id` and `Cache-Control: no-store` stay
/// whatever the hook did), else the default problem response.
#[cold]
pub(super) fn respond<B: From<Vec<u8>>>(
    answer: &Answer<'_>,
    request_id: &RequestId,
    hook: Option<&RefusalHook>,
) -> Response<B> {
    if let Some(hook) = hook {
        let cx = RefusalContext {
            decision: answer.decision(),
            retry_after_secs: answer.retry_after_secs(),
            request_id,
        };
        if let Some(custom) = hook(&cx) {
            let mut custom = custom.map(B::from);
            answer.write_headers(custom.headers_mut());
            return custom;
        }
    }
    answer.refusal::<B>().expect("not an admit")
}
