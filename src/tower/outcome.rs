//! What the layer decided for one request, for handlers and for telemetry.

use std::sync::Arc;

use crate::decision::Decision;
use crate::http::RequestId;
use crate::identity::RouteClass;

/// What the layer decided for one request, in the request extensions (for handlers, e.g. to
/// combine with their own limiter through [`crate::http::Combined`]) and in the response
/// extensions (for telemetry). The decision is what the profile computed, also when shadow
/// mode let the request through.
#[derive(Clone, Debug)]
pub struct RateLimitOutcome {
    /// What the profile computed (a refusal here with `enforced: false` was shadowed).
    pub decision: Decision,
    /// The route class handle.
    pub class: RouteClass,
    /// The route class name.
    pub class_name: Arc<str>,
    /// False when a refusal was let through by shadow mode.
    pub enforced: bool,
    /// The request id sent back to the caller.
    pub request_id: RequestId,
}
