//! The numbers the hot path reads, built from a validated [`Profile`] and swapped whole on
//! reload (behind `arc-swap`), so that one decision never mixes two profiles.

use std::sync::Arc;

use crate::bucket::{Limits, Rate};
use crate::identity::{Digest, DigestMap};
use crate::profile::{Mode, Profile, ProfileError, RouteClassLimits};

/// One route class as the hot path sees it. Indexed by `RouteClass`, whose numbers never
/// change for a limiter's life: a reload keeps the old classes at their places.
#[derive(Clone, Debug)]
pub(crate) struct ClassConfig {
    pub(crate) name: Arc<str>,
    pub(crate) limits: Limits,
    pub(crate) shadow: bool,
}

/// Shared capacity, if the profile has it.
#[derive(Clone, Debug)]
pub(crate) struct CapacityConfig {
    pub(crate) shards: u32,
    pub(crate) window_ns: u64,
    pub(crate) slots_per_window: u64,
    /// `ceil(slots_per_window * tenant_share)`: the cap of an unlisted tenant (weight 1) and of
    /// the anonymous pseudo-tenant.
    pub(crate) default_cap: u64,
    /// Listed tenants by tenant digest: (shard if pinned, cap).
    pub(crate) listed: DigestMap<(Option<u32>, u64)>,
}

impl CapacityConfig {
    /// The most slots of its shard a tenant of `weight` may hold in one window:
    /// `ceil(slots * share * weight)`, at most all of them. The product is computed in floating
    /// point once per profile; a relative tolerance of 1e-9 keeps `0.1 * 3` from rounding up
    /// to a whole extra slot.
    pub(crate) fn cap(slots: u64, share: f64, weight: f64) -> u64 {
        let exact = slots as f64 * share * weight;
        let cap = (exact * (1.0 - 1e-9)).ceil();
        (cap.max(1.0) as u64).min(slots)
    }
}

/// Everything `admit` reads, for one profile.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) classes: Box<[ClassConfig]>,
    pub(crate) capacity: Option<CapacityConfig>,
    pub(crate) profile: Arc<Profile>,
}

pub(crate) fn limits(l: &RouteClassLimits) -> Limits {
    Limits {
        burst: Rate::new(l.burst.tokens.0, l.burst.per.as_nanos()),
        sustained: Rate::new(l.sustained.tokens.0, l.sustained.per.as_nanos()),
    }
}

impl Config {
    /// The configuration of a new limiter: classes in profile order.
    pub(crate) fn new(profile: Profile, tenant_digest: impl Fn(&str) -> Digest) -> Config {
        let order: Vec<String> = profile
            .route_classes
            .iter()
            .map(|(k, _)| k.to_owned())
            .collect();
        Config::with_order(profile, &order, tenant_digest)
    }

    /// The configuration after a reload: the old classes keep their numbers, new ones follow.
    /// Refuses a profile that drops a class (a caller may hold its handle) or resizes the table.
    pub(crate) fn reload(
        &self,
        profile: Profile,
        tenant_digest: impl Fn(&str) -> Digest,
    ) -> Result<Config, ProfileError> {
        let old = &self.profile;
        if profile.identities.capacity != old.identities.capacity {
            return Err(ProfileError::refused(format!(
                "identities.capacity: cannot change from {} to {} on reload; the table is \
                 allocated once: build a new Limiter to resize it",
                old.identities.capacity.0, profile.identities.capacity.0
            )));
        }
        if profile.anonymous != old.anonymous {
            return Err(ProfileError::refused(
                "anonymous: prefix lengths cannot change on reload (they are part of every \
                 anonymous identity); build a new Limiter to change them"
                    .to_owned(),
            ));
        }
        let mut order: Vec<String> = self.classes.iter().map(|c| c.name.to_string()).collect();
        if let Some(gone) = order
            .iter()
            .find(|n| profile.route_classes.get(n).is_none())
        {
            return Err(ProfileError::refused(format!(
                "route_classes.{gone}: the class is missing from the new profile; removing a \
                 route class on reload is refused (handles to it may be in use)"
            )));
        }
        for (name, _) in profile.route_classes.iter() {
            if !order.iter().any(|n| n == name) {
                order.push(name.to_owned());
            }
        }
        Ok(Config::with_order(profile, &order, tenant_digest))
    }

    fn with_order(
        profile: Profile,
        order: &[String],
        tenant_digest: impl Fn(&str) -> Digest,
    ) -> Config {
        let classes = order
            .iter()
            .map(|name| {
                let l = profile.route_classes.get(name).expect("validated");
                ClassConfig {
                    name: name.as_str().into(),
                    limits: limits(l),
                    shadow: l.mode.unwrap_or(profile.mode) == Mode::Shadow,
                }
            })
            .collect();
        let capacity = profile.shared_capacity.as_ref().map(|sc| {
            let slots = sc.slots_per_window.0;
            CapacityConfig {
                shards: sc.shards.0,
                window_ns: sc.window.as_nanos(),
                slots_per_window: slots,
                default_cap: CapacityConfig::cap(slots, sc.tenant_share.0, 1.0),
                listed: sc
                    .tenants
                    .iter()
                    .map(|(name, t)| {
                        let cap = CapacityConfig::cap(slots, sc.tenant_share.0, t.weight.0);
                        (tenant_digest(name), (t.shard, cap))
                    })
                    .collect(),
            }
        });
        Config {
            classes,
            capacity,
            profile: Arc::new(profile),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_round_up_but_not_from_float_noise() {
        assert_eq!(CapacityConfig::cap(4000, 0.5, 1.0), 2000);
        assert_eq!(CapacityConfig::cap(4000, 0.5, 1.5), 3000);
        assert_eq!(CapacityConfig::cap(10, 0.1, 3.0), 3);
        assert_eq!(CapacityConfig::cap(10, 0.25, 1.0), 3);
        assert_eq!(CapacityConfig::cap(3, 0.5, 1.0), 2);
        assert_eq!(CapacityConfig::cap(4000, 0.5, 10.0), 4000);
        assert_eq!(CapacityConfig::cap(1, 0.01, 1.0), 1);
    }
}
