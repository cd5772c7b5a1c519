//! What the layer was asked to add beyond the contract's headers: set by
//! [`RateLimitLayer`](super::RateLimitLayer)'s methods, read by the service and its future.

/// The layer's options (see the [`RateLimitLayer`](super::RateLimitLayer) methods). The
/// default adds nothing, so that an admitted request allocates nothing.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Options {
    pub(super) outcome_in_request: bool,
    pub(super) outcome_in_response: bool,
    pub(super) request_id_on_every_response: bool,
    pub(super) legacy_headers: bool,
}
