//! Several limiters on one request (gateway and application): one combined answer, the most
//! restrictive with the longest known wait, while telemetry keeps each layer's own.

use core::time::Duration;

use crate::decision::{BucketKind, Cause, Decision};

/// Combines the decisions of several limiters (gateway, application, ...) into the one a
/// response carries, keeping every layer's own answer for telemetry.
///
/// The order, most restrictive first:
/// 0. `Exceeds`: some layer will never admit the request at its cost, so waiting cannot help
///    and no `Retry-After` is sent (429); the first such layer's bucket is named.
/// 1. `Unavailable` with an unknown wait (`retry_after: None`): the wait is unknown, so no
///    `Retry-After` is sent, even if another layer knows a wait (a known wait would understate
///    an unknown one, and none is invented). Among several, `StoreUnavailable` is chosen before
///    `TableFull`, so that the caller learns the limiter itself is the problem.
/// 2. `Unavailable` with a known wait: status 503 with that layer's cause, and `Retry-After`
///    the longest wait of **all** refusing layers (a request that also waits for its own
///    bucket is not admitted sooner). Every such wait is this caller's own or the capacity
///    window, so none is a neighbour's.
/// 3. `Throttle`: 429 with the longest wait among throttling layers and that layer's bucket.
/// 4. `Admit` when every layer admits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Combined {
    layers: Vec<LayerDecision>,
}

/// One limiter's own decision inside a [`Combined`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerDecision {
    /// Which limiter (for telemetry, e.g. `"gateway"`, `"application"`).
    pub layer: &'static str,
    /// What it decided.
    pub decision: Decision,
}

impl Combined {
    /// No layer yet (combines to `Admit`).
    pub fn new() -> Self {
        Combined::default()
    }

    /// Records one layer's decision.
    pub fn push(&mut self, layer: &'static str, decision: Decision) -> &mut Self {
        self.layers.push(LayerDecision { layer, decision });
        self
    }

    /// Every layer's own decision, in the order pushed.
    pub fn layers(&self) -> &[LayerDecision] {
        &self.layers
    }

    /// The combined decision (see the type's docs for the order).
    pub fn decision(&self) -> Decision {
        combine(self.layers.iter().map(|l| l.decision))
    }
}

/// The most restrictive of `decisions` with the longest known wait; see [`Combined`].
pub fn combine(decisions: impl IntoIterator<Item = Decision>) -> Decision {
    let mut exceeds: Option<BucketKind> = None;
    let mut unknown: Option<Cause> = None;
    let mut unavailable: Option<(Duration, Cause)> = None;
    let mut throttle: Option<(Duration, BucketKind)> = None;
    for d in decisions {
        match d {
            Decision::Admit => {}
            Decision::Exceeds { bucket } => {
                exceeds = exceeds.or(Some(bucket));
            }
            Decision::Throttle {
                retry_after,
                bucket,
            } => {
                if throttle.is_none_or(|(w, _)| retry_after > w) {
                    throttle = Some((retry_after, bucket));
                }
            }
            Decision::Unavailable {
                retry_after: None,
                cause,
            } => {
                if unknown.is_none() || cause == Cause::StoreUnavailable {
                    unknown = Some(cause);
                }
            }
            Decision::Unavailable {
                retry_after: Some(w),
                cause,
            } => {
                if unavailable.is_none_or(|(u, _)| w > u) {
                    unavailable = Some((w, cause));
                }
            }
        }
    }
    if let Some(bucket) = exceeds {
        Decision::Exceeds { bucket }
    } else if let Some(cause) = unknown {
        Decision::Unavailable {
            retry_after: None,
            cause,
        }
    } else if let Some((wait, cause)) = unavailable {
        Decision::Unavailable {
            retry_after: Some(throttle.map_or(wait, |(t, _)| t.max(wait))),
            cause,
        }
    } else if let Some((retry_after, bucket)) = throttle {
        Decision::Throttle {
            retry_after,
            bucket,
        }
    } else {
        Decision::Admit
    }
}
