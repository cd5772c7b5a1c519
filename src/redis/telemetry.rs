//! The store's own telemetry (feature `metrics`), next to the decision counters the engine
//! records for both backends (see [`crate::observe`]): how long a round trip to Redis takes, why
//! calls fail, and how many throttles the deny cache answered without one.
//!
//! | metric | kind | labels |
//! | --- | --- | --- |
//! | `tollgate_store_round_trip_seconds` | histogram | (every call the server answered) |
//! | `tollgate_store_errors_total` | counter | `kind` (timeout, connection, script, reply, expired) |
//! | `tollgate_deny_cache_hits_total` | counter | |
//! | `tollgate_store_program` | gauge | `program` (module, function, script): 1 for the one deciding (see `program.rs`) |
//!
//! Handles are registered when the limiter connects: install the recorder first.

use core::time::Duration;

use super::script::Failure;

/// The failures, in the order of [`StoreMetrics`]'s error handles.
#[cfg(feature = "metrics")]
const FAILURES: [Failure; 5] = [
    Failure::Timeout,
    Failure::Connection,
    Failure::Script,
    Failure::Reply,
    Failure::Expired,
];

/// The store's metric handles (nothing without the `metrics` feature).
pub(super) struct StoreMetrics {
    #[cfg(feature = "metrics")]
    round_trip: metrics::Histogram,
    #[cfg(feature = "metrics")]
    errors: [metrics::Counter; 5],
    #[cfg(feature = "metrics")]
    deny_hits: metrics::Counter,
}

impl StoreMetrics {
    pub(super) fn new() -> StoreMetrics {
        StoreMetrics {
            #[cfg(feature = "metrics")]
            round_trip: metrics::histogram!("tollgate_store_round_trip_seconds"),
            #[cfg(feature = "metrics")]
            errors: FAILURES
                .map(|f| metrics::counter!("tollgate_store_errors_total", "kind" => f.label())),
            #[cfg(feature = "metrics")]
            deny_hits: metrics::counter!("tollgate_deny_cache_hits_total"),
        }
    }

    /// One call's result and how long it took: the round trip if the server answered, the
    /// failure's kind if any.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    #[inline]
    pub(super) fn call(&self, failure: Option<Failure>, took: Duration) {
        #[cfg(feature = "metrics")]
        {
            if !matches!(failure, Some(Failure::Timeout | Failure::Connection)) {
                self.round_trip.record(took.as_secs_f64());
            }
            if let Some(f) = failure {
                let i = FAILURES.iter().position(|x| *x == f).unwrap_or(0);
                self.errors[i].increment(1);
            }
        }
    }

    /// The deny cache answered a throttle without a round trip.
    #[inline]
    pub(super) fn deny_hit(&self) {
        #[cfg(feature = "metrics")]
        self.deny_hits.increment(1);
    }
}
