//! The core both backends share: the config cell, the key hasher, reload, shadow mode, the
//! discovery document and metrics. The embedded [`Limiter`](crate::Limiter) and the Redis
//! backend each own one `Engine` and differ only in where bucket and capacity state lives:
//! each computes a decision against its state, then hands it to [`Engine::conclude`].

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::{self, Config, ConfigCell};
use crate::decision::Decision;
use crate::identity::{KeyHasher, RouteClass, Tenant};
use crate::profile::{Profile, ProfileError};
use crate::published::PublishedLimits;

/// What metrics record besides the decisions: per-tenant labels and the error-budget callback.
#[cfg(feature = "metrics")]
pub(crate) use crate::observe::Options as ObserveOptions;

/// Without the `metrics` feature there is nothing to set.
#[cfg(not(feature = "metrics"))]
#[derive(Clone, Default)]
pub(crate) struct ObserveOptions;

/// What a backend decided and what the profile computed: they differ only in shadow mode, where
/// every request is admitted and the refusal it would have had is reported instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// What the caller gets.
    pub decision: Decision,
    /// What the profile says: in enforce mode the same as `decision`.
    pub computed: Decision,
}

impl Verdict {
    /// An admission (the same in either mode).
    pub(crate) const ADMITTED: Verdict = Verdict {
        decision: Decision::Admit,
        computed: Decision::Admit,
    };

    /// True when a refusal was not enforced (shadow mode).
    pub fn is_shadowed(&self) -> bool {
        self.decision != self.computed
    }

    /// The shadow-mode rule, the one place it is written: a class in shadow mode admits
    /// whatever was computed.
    #[inline]
    pub(crate) fn of(shadow: bool, computed: Decision) -> Verdict {
        Verdict {
            decision: if shadow { Decision::Admit } else { computed },
            computed,
        }
    }
}

/// The backend-independent half of a limiter.
pub(crate) struct Engine {
    /// Swapped whole by `reload`; a decision reads one snapshot.
    pub(crate) config: ConfigCell,
    /// Keys identities and tenants with the limiter's secret.
    pub(crate) hasher: KeyHasher,
    /// Serialises reloads (never taken by a decision).
    reload_lock: Mutex<()>,
    /// Per-tenant counters are registered on every reload too.
    per_tenant: bool,
    #[cfg(feature = "metrics")]
    observer: crate::observe::Observer,
}

impl Engine {
    /// The core for `profile`, keyed by `secret` (not empty: the builders check).
    pub(crate) fn new(profile: Profile, secret: &[u8], observe: ObserveOptions) -> Engine {
        let hasher = config::key_hasher(&profile, secret);
        #[cfg(feature = "metrics")]
        let per_tenant = observe.per_tenant;
        #[cfg(not(feature = "metrics"))]
        let (per_tenant, _) = (false, observe);
        let config = Config::new(profile, &hasher, per_tenant);
        Engine {
            config: ConfigCell::new(config),
            hasher,
            reload_lock: Mutex::new(()),
            per_tenant,
            #[cfg(feature = "metrics")]
            observer: crate::observe::Observer::new(observe),
        }
    }

    /// The handle of a route class, or `None` if the profile has no such class.
    pub(crate) fn route_class(&self, name: &str) -> Option<RouteClass> {
        self.config.load().route_class(name)
    }

    /// The profile in force (a snapshot).
    pub(crate) fn profile(&self) -> Arc<Profile> {
        self.config.load().profile.clone()
    }

    /// The discovery document of the profile in force.
    pub(crate) fn published_limits(&self) -> PublishedLimits {
        self.config.load().published.clone()
    }

    /// Swaps in `profile` (see `Limiter::reload` for the rules), or refuses it and keeps the
    /// old one in force.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn reload(&self, profile: Profile) -> Result<(), ProfileError> {
        self.reload_as(profile, None)
    }

    /// [`Engine::reload`], marking the new profile as the fleet's `version` (Redis backend):
    /// the version is part of the same snapshot as the limits, so the discovery document
    /// never shows one profile's limits under another's version.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn reload_as(
        &self,
        profile: Profile,
        version: Option<u64>,
    ) -> Result<(), ProfileError> {
        self.reload_with(profile, version, |_, _| {})
    }

    /// [`Engine::reload_as`], calling `prepare(old, new)` under the reload lock once the new
    /// config is built and before it is published: the embedded backend re-tags its table
    /// there and sets the instant the new profile takes effect.
    pub(crate) fn reload_with(
        &self,
        profile: Profile,
        version: Option<u64>,
        prepare: impl FnOnce(&Config, &mut Config),
    ) -> Result<(), ProfileError> {
        let _one_at_a_time = self.reload_lock.lock();
        let old = self.config.load();
        let mut new = old.reload(profile, &self.hasher, self.per_tenant)?;
        new.published.profile_version = version;
        prepare(&old, &mut new);
        drop(old);
        self.config.store(new);
        Ok(())
    }

    /// The fleet profile's version in force, if the profile in force came from one.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn profile_version(&self) -> Option<u64> {
        self.config.load().published.profile_version
    }

    /// Ends a charging decision: records what the profile `computed` for `key` (feature
    /// `metrics`; `now` in nanoseconds on any monotonic clock, for the error budget's windows)
    /// and applies the class's mode.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn conclude(
        &self,
        cfg: &Config,
        shadow: bool,
        class: RouteClass,
        tenant: Tenant<'_>,
        computed: Decision,
        now: u64,
    ) -> Verdict {
        #[cfg(feature = "metrics")]
        self.observer
            .record(&cfg.telemetry, &self.hasher, class, tenant, computed, now);
        Verdict::of(shadow, computed)
    }
}

impl Engine {
    /// [`Engine::conclude`] of an admission (feature `metrics`): the answer is `Admit` in
    /// either mode, so no verdict is built. The tenant by reference: it is read only where the
    /// profile counts per tenant, and a copy of it would be made on every admission.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn admitted(&self, cfg: &Config, class: RouteClass, tenant: &Tenant<'_>, now: u64) {
        #[cfg(feature = "metrics")]
        self.observer
            .admitted(&cfg.telemetry, &self.hasher, class, tenant, now);
    }

    /// Counts an admission of `key` that left less than `observability.near_limit` of its
    /// burst (feature `metrics`); called only for those.
    #[cold]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn near_limit(&self, cfg: &Config, class: RouteClass) {
        #[cfg(feature = "metrics")]
        self.observer
            .near_limit(&cfg.telemetry, class.index() as usize);
    }
}

/// 32 bytes from the OS-seeded hasher of the standard library.
pub(crate) fn random_secret() -> Vec<u8> {
    let s = RandomState::new();
    (0..4u64)
        .flat_map(|i| s.hash_one(i).to_le_bytes())
        .collect()
}
