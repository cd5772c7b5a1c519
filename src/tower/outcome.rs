//! What the layer decided for one request, for handlers and for telemetry.

use crate::decision::Decision;
use crate::identity::RouteClass;

/// What the layer decided for one request: small and `Copy`, put in the extensions only where
/// the layer was asked to ([`RateLimitLayer::outcome_in_request`](super::RateLimitLayer::outcome_in_request)
/// for handlers, e.g. to combine with their own limiter through [`crate::http::Combined`];
/// [`RateLimitLayer::outcome_in_response`](super::RateLimitLayer::outcome_in_response) for
/// telemetry). The decision is what the profile computed, also when shadow mode let the request
/// through.
///
/// The class is the handle; its name is the backend's (`limiter.route_class("read")` gives the
/// handle to compare with). The request id, where there is one, is the request's or the
/// response's `X-Request-Id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitOutcome {
    /// What the profile computed (a refusal here with `enforced: false` was shadowed).
    pub decision: Decision,
    /// The route class handle.
    pub class: RouteClass,
    /// False when a refusal was let through by shadow mode.
    pub enforced: bool,
}
