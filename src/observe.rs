//! Operator telemetry (feature `metrics`): decision counters, the Retry-After histogram, the
//! capacity-rejection ratio over `error_budget.window`, and the error-budget alert.
//!
//! Metric handles are registered with the `metrics` recorder when the limiter is built and on
//! every reload: install the recorder (e.g. the Prometheus exporter) first. Nothing here reaches
//! callers; labels carry no tenant or principal unless [`crate::Builder::per_tenant_metrics`]
//! opts in, and even then only the profile's listed tenants (all others are `other`).
//!
//! | metric | kind | labels |
//! | --- | --- | --- |
//! | `tollgate_decisions_total` | counter | `outcome` (admitted, throttled, exceeds, unavailable), `route_class`, `cause` (none, burst, sustained, shard_full, tenant_share, table_full, store_unavailable), `mode` (enforce, shadow) |
//! | `tollgate_near_limit_total` | counter | `route_class`, `mode`: admitted with less than `observability.near_limit` of the burst left |
//! | `tollgate_tenant_decisions_total` | counter | `tenant`, `outcome` (opt-in) |
//! | `tollgate_sdk_decisions_total` | counter | `sdk` (the profile's `observability.sdk_versions`, `other`, `none`), `outcome`: the tower layer, when the profile lists any |
//! | `tollgate_retry_after_seconds` | histogram | `route_class` |
//! | `tollgate_capacity_rejection_ratio` | gauge | |
//! | `tollgate_error_budget_exceeded` | gauge (0 or 1) | |
//!
//! The Redis backend (feature `redis`) records the same series, plus the store's own: round
//! trips, errors by kind and deny-cache hits (`tollgate_store_*`, `tollgate_deny_cache_hits_total`;
//! see the `redis` module's telemetry), and for a fleet profile the version in force and the
//! versions not put in force (`tollgate_fleet_profile_*`, see `redis::FleetProfile::watch`).

use core::time::Duration;
use std::sync::Arc;

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};

use crate::decision::{Decision, Outcome};
use crate::identity::{Digest, DigestMap, KeyHasher, RouteClass, Tenant};
use crate::sync::unmodelled::{AtomicBool, AtomicU64, Ordering};

/// What the error-budget alert reports, to the callback and in the `tracing` event.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetAlert {
    /// True when the budget was just exceeded, false when the ratio fell back within it.
    pub exceeded: bool,
    /// Capacity refusals (503) as a share of all decisions over the window.
    pub ratio: f64,
    /// `error_budget.capacity_rejections`.
    pub threshold: f64,
    /// `error_budget.window`.
    pub window: Duration,
    /// Decisions counted in the window.
    pub decisions: u64,
    /// Of which capacity refusals.
    pub capacity_rejections: u64,
}

type Callback = Arc<dyn Fn(&BudgetAlert) + Send + Sync>;

/// Builder options.
#[derive(Clone, Default)]
pub(crate) struct Options {
    pub(crate) per_tenant: bool,
    pub(crate) callback: Option<Callback>,
}

/// Handles registered for one profile; they live in its `Config`, so `admit` reaches them
/// through the same per-thread snapshot as the limits.
pub(crate) struct Handles {
    /// Per class: by [`Outcome::index`], for that class's mode.
    decisions: Vec<[Counter; Outcome::COUNT]>,
    /// Per class: admissions that left less than `observability.near_limit` of the burst.
    near_limit: Vec<Counter>,
    retry_after: Vec<Histogram>,
    /// Listed tenants, then `other` and `anonymous`: by [`Outcome::index`], each outcome's
    /// handle counting under its label (`admitted`, `throttled`, `unavailable`).
    tenants: DigestMap<[Counter; Outcome::COUNT]>,
    other: [Counter; Outcome::COUNT],
    anonymous: [Counter; Outcome::COUNT],
    /// `(threshold, window)` from `error_budget`.
    budget: Option<(f64, Duration)>,
}

impl core::fmt::Debug for Handles {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Handles")
            .field("classes", &self.decisions.len())
            .finish_non_exhaustive()
    }
}

impl Handles {
    /// Registers the handles of one profile: `classes` as (name, shadow) in handle order, the
    /// listed `tenants` as (digest, name) when per-tenant metrics are on (else empty), and
    /// `error_budget` as (threshold, window).
    pub(crate) fn new<'a>(
        classes: impl Iterator<Item = (&'a str, bool)> + Clone,
        tenants: impl Iterator<Item = (Digest, &'a str)>,
        budget: Option<(f64, Duration)>,
    ) -> Handles {
        let decisions = classes
            .clone()
            .map(|(class, shadow)| {
                let mode = if shadow { "shadow" } else { "enforce" };
                Outcome::ALL.map(|o| {
                    counter!("tollgate_decisions_total", "outcome" => o.label(), "route_class" => class.to_owned(), "cause" => o.cause_label(), "mode" => mode)
                })
            })
            .collect();
        let near_limit = classes
            .clone()
            .map(|(class, shadow)| {
                let mode = if shadow { "shadow" } else { "enforce" };
                counter!("tollgate_near_limit_total", "route_class" => class.to_owned(), "mode" => mode)
            })
            .collect();
        let retry_after = classes
            .map(|(class, _)| {
                histogram!("tollgate_retry_after_seconds", "route_class" => class.to_owned())
            })
            .collect();
        let tenant = |name: &str| {
            Outcome::ALL.map(|o| {
                counter!("tollgate_tenant_decisions_total", "tenant" => name.to_owned(), "outcome" => o.label())
            })
        };
        Handles {
            decisions,
            near_limit,
            retry_after,
            tenants: tenants.map(|(d, name)| (d, tenant(name))).collect(),
            other: tenant("other"),
            anonymous: tenant("anonymous"),
            budget,
        }
    }
}

/// Sub-windows of `error_budget.window` kept for the sliding ratio.
const SUBWINDOWS: u64 = 10;

struct SubWindow {
    epoch: AtomicU64,
    decisions: AtomicU64,
    rejections: AtomicU64,
}

/// Records every decision; evaluates the error budget once per sub-window.
pub(crate) struct Observer {
    pub(crate) options: Options,
    ring: [SubWindow; SUBWINDOWS as usize],
    exceeded: AtomicBool,
    exceeded_gauge: Gauge,
    ratio_gauge: Gauge,
}

impl Observer {
    pub(crate) fn new(options: Options) -> Observer {
        Observer {
            options,
            ring: core::array::from_fn(|_| SubWindow {
                epoch: AtomicU64::new(u64::MAX),
                decisions: AtomicU64::new(0),
                rejections: AtomicU64::new(0),
            }),
            exceeded: AtomicBool::new(false),
            exceeded_gauge: gauge!("tollgate_error_budget_exceeded"),
            ratio_gauge: gauge!("tollgate_capacity_rejection_ratio"),
        }
    }

    /// Counts the decision the profile computed (in shadow mode, the one not enforced: the
    /// class's counters carry `mode="shadow"`).
    pub(crate) fn record(
        &self,
        h: &Handles,
        hasher: &KeyHasher,
        class: RouteClass,
        tenant: Tenant<'_>,
        computed: Decision,
        now: u64,
    ) {
        let class = class.index() as usize;
        let i = computed.outcome().index();
        if let Some(c) = h.decisions.get(class) {
            c[i].increment(1);
        }
        if let (Some(wait), Some(hist)) = (computed.retry_after(), h.retry_after.get(class)) {
            hist.record(wait.as_secs_f64());
        }
        self.tenant_and_budget(h, hasher, tenant, computed, now);
    }

    /// [`Observer::record`] of an admission: the class's counter; the tenant's and the error
    /// budget's only when the profile asks for them.
    #[inline]
    pub(crate) fn admitted(
        &self,
        h: &Handles,
        hasher: &KeyHasher,
        class: RouteClass,
        tenant: &Tenant<'_>,
        now: u64,
    ) {
        if let Some(c) = h.decisions.get(class.index() as usize) {
            c[Outcome::Admitted.index()].increment(1);
        }
        if self.options.per_tenant || h.budget.is_some() {
            self.tenant_and_budget(h, hasher, *tenant, Decision::Admit, now);
        }
    }

    /// The per-tenant counters (when asked for) and the error budget's window.
    fn tenant_and_budget(
        &self,
        h: &Handles,
        hasher: &KeyHasher,
        tenant: Tenant<'_>,
        computed: Decision,
        now: u64,
    ) {
        let i = computed.outcome().index();
        if self.options.per_tenant {
            let group = match tenant {
                Tenant::Anonymous => &h.anonymous,
                named => h.tenants.get(&named.digest(hasher)).unwrap_or(&h.other),
            };
            group[i].increment(1);
        }
        if let Some((threshold, window)) = h.budget {
            let rejected = matches!(computed, Decision::Unavailable { .. });
            self.count(now, rejected, threshold, window);
        }
    }

    /// Counts an admission of `class` that left less than `observability.near_limit` of the
    /// burst (cold: most admissions are not near the limit).
    #[cold]
    pub(crate) fn near_limit(&self, h: &Handles, class: usize) {
        if let Some(c) = h.near_limit.get(class) {
            c.increment(1);
        }
    }

    /// Adds one decision to the current sub-window; the first decision of a new sub-window
    /// evaluates the ratio over the whole window. Counts are approximate at sub-window edges
    /// (a few decisions may land in a slot being reset), which the alert tolerates.
    fn count(&self, now: u64, rejected: bool, threshold: f64, window: Duration) {
        let sub_ns = (window.as_nanos() as u64 / SUBWINDOWS).max(1);
        let epoch = now / sub_ns;
        let slot = &self.ring[(epoch % SUBWINDOWS) as usize];
        // Relaxed: these are statistics; no other memory is published through them.
        let seen = slot.epoch.load(Ordering::Relaxed);
        if seen != epoch
            && slot
                .epoch
                .compare_exchange(seen, epoch, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            slot.decisions.store(0, Ordering::Relaxed);
            slot.rejections.store(0, Ordering::Relaxed);
            self.evaluate(epoch, threshold, window);
        }
        slot.decisions.fetch_add(1, Ordering::Relaxed);
        if rejected {
            slot.rejections.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The ratio over the sub-windows before `epoch` that still fall in the window.
    fn totals(&self, epoch: u64) -> (u64, u64) {
        let (mut decisions, mut rejections) = (0, 0);
        for s in &self.ring {
            let e = s.epoch.load(Ordering::Relaxed);
            if e < epoch && epoch - e < SUBWINDOWS {
                decisions += s.decisions.load(Ordering::Relaxed);
                rejections += s.rejections.load(Ordering::Relaxed);
            }
        }
        (decisions, rejections)
    }

    #[cold]
    fn evaluate(&self, epoch: u64, threshold: f64, window: Duration) {
        let (decisions, capacity_rejections) = self.totals(epoch);
        let ratio = if decisions == 0 {
            0.0
        } else {
            capacity_rejections as f64 / decisions as f64
        };
        self.ratio_gauge.set(ratio);
        let exceeded = ratio > threshold;
        if self.exceeded.swap(exceeded, Ordering::Relaxed) == exceeded {
            return;
        }
        self.exceeded_gauge.set(if exceeded { 1.0 } else { 0.0 });
        let alert = BudgetAlert {
            exceeded,
            ratio,
            threshold,
            window,
            decisions,
            capacity_rejections,
        };
        if exceeded {
            tracing::warn!(ratio, threshold, decisions, capacity_rejections, window = ?window,
                "tollgate: capacity rejections exceed the error budget");
        } else {
            tracing::info!(
                ratio,
                threshold,
                "tollgate: capacity rejections back within the error budget"
            );
        }
        if let Some(cb) = &self.options.callback {
            cb(&alert);
        }
    }
}
