//! The response future: the decision (which may wait for a store) and the inner call.

use core::future::Future;
use core::pin::Pin;
use std::sync::Arc;

use ::http::{Request, Response};
use ::tower::Service;

use super::outcome::RateLimitOutcome;
use super::state::{CompiledProfile, LayerState};
use crate::admission::Admission;
use crate::http::{Answer, Caller, RequestId};

/// The response future of [`RateLimit`](super::RateLimit).
///
/// Boxed: one allocation per limited request, since the backend's decision future has no name
/// to put in a type. A request that matches no route is boxed as well, untouched.
pub type ResponseFuture<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

/// Decides a request that matched the route at `route` of `compiled`, and answers the refusal
/// or calls `inner` and adds the rate-limit headers to its response.
pub(super) async fn respond<S, A, X, ReqBody, ResBody>(
    mut inner: S,
    mut request: Request<ReqBody>,
    state: Arc<LayerState<A, X>>,
    compiled: Arc<CompiledProfile>,
    route: usize,
    caller: Caller,
    request_id: RequestId,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    A: Admission,
    ResBody: From<Vec<u8>>,
{
    let entry = compiled.routes.entry(route);
    let profile = &*compiled.profile;
    let key = caller.key(entry.class());
    let verdict = state.admission.evaluate(&key).await;
    let remaining = if profile.expose_remaining {
        state.admission.remaining(&key).await
    } else {
        None
    };
    let outcome = RateLimitOutcome {
        decision: verdict.computed,
        class: entry.class(),
        class_name: Arc::clone(entry.class_name_arc()),
        enforced: !verdict.is_shadowed(),
        request_id: request_id.clone(),
    };
    let answer = Answer::new(verdict.decision, profile, &request_id)
        .with_policy(entry.policy())
        .with_remaining(remaining);
    if let Some(mut refusal) = answer.refusal::<ResBody>() {
        refusal.extensions_mut().insert(outcome);
        return Ok(refusal);
    }
    request.extensions_mut().insert(outcome.clone());
    let mut response = inner.call(request).await?;
    answer.write_headers(response.headers_mut());
    response.extensions_mut().insert(outcome);
    Ok(response)
}
