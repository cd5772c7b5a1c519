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
//! | `tollgate_lease_decisions_total` | counter | `source` (lease: spent locally; store: a round trip), leased classes only |
//! | `tollgate_lease_tokens` | histogram | (the size of each lease the store granted) |
//! | `tollgate_lease_tokens_returned_total` | counter | `reason` (expiry, eviction, reload, shutdown) |
//! | `tollgate_lease_tokens_stranded_total` | counter | (unspent tokens whose refund failed: charged until the buckets refill) |
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

/// Why a lease's unspent tokens went back to the store (the label of
/// `tollgate_lease_tokens_returned_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Return {
    Expiry,
    Eviction,
    Reload,
    Shutdown,
}

#[cfg(feature = "metrics")]
const RETURNS: [Return; 4] = [
    Return::Expiry,
    Return::Eviction,
    Return::Reload,
    Return::Shutdown,
];

impl Return {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Return::Expiry => "expiry",
            Return::Eviction => "eviction",
            Return::Reload => "reload",
            Return::Shutdown => "shutdown",
        }
    }
}

/// The lease metric handles (nothing without the `metrics` feature); clones share them.
#[derive(Clone)]
pub(super) struct LeaseMetrics {
    #[cfg(feature = "metrics")]
    local: metrics::Counter,
    #[cfg(feature = "metrics")]
    store: metrics::Counter,
    #[cfg(feature = "metrics")]
    size: metrics::Histogram,
    #[cfg(feature = "metrics")]
    returned: [metrics::Counter; 4],
    #[cfg(feature = "metrics")]
    stranded: metrics::Counter,
}

impl LeaseMetrics {
    pub(super) fn new() -> LeaseMetrics {
        LeaseMetrics {
            #[cfg(feature = "metrics")]
            local: metrics::counter!("tollgate_lease_decisions_total", "source" => "lease"),
            #[cfg(feature = "metrics")]
            store: metrics::counter!("tollgate_lease_decisions_total", "source" => "store"),
            #[cfg(feature = "metrics")]
            size: metrics::histogram!("tollgate_lease_tokens"),
            #[cfg(feature = "metrics")]
            returned: RETURNS.map(|r| {
                metrics::counter!("tollgate_lease_tokens_returned_total", "reason" => r.label())
            }),
            #[cfg(feature = "metrics")]
            stranded: metrics::counter!("tollgate_lease_tokens_stranded_total"),
        }
    }

    /// A decision on a leased class: spent locally, or a round trip.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    #[inline]
    pub(super) fn decision(&self, local: bool) {
        #[cfg(feature = "metrics")]
        if local {
            self.local.increment(1);
        } else {
            self.store.increment(1);
        }
    }

    /// The store granted a lease of `tokens`.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(super) fn granted(&self, tokens: u32) {
        #[cfg(feature = "metrics")]
        self.size.record(f64::from(tokens));
    }

    /// `tokens` went back for `why` (`ok`), or could not (stranded).
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(super) fn returned(&self, why: Return, tokens: u32, ok: bool) {
        #[cfg(feature = "metrics")]
        if ok {
            let i = RETURNS.iter().position(|r| *r == why).unwrap_or(0);
            self.returned[i].increment(u64::from(tokens));
        } else {
            self.stranded.increment(u64::from(tokens));
        }
    }
}
