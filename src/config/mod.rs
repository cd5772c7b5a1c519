//! The numbers the engine reads, built from a validated [`Profile`] and swapped whole on
//! reload, so that one decision never mixes two profiles.
//!
//! This is the one module that reads the profile's scalars: everything below it (bucket math,
//! shared capacity, metrics) gets plain integers, and the discovery document is derived here
//! once per profile.

use core::time::Duration;
use std::sync::Arc;

use crate::bucket::{Limits, Rate, Tats};
use crate::capacity::{CapacityConfig, IdentityCaps, ShardCounter};
use crate::identity::{KeyHasher, RouteClass};
use crate::profile::{Mode, Profile, ProfileError, RouteClassLimits};
use crate::published::{
    PublishedBucket, PublishedCapacity, PublishedClass, PublishedLimits, PublishedRoute,
};
use crate::table::{Tag, EPOCHS};

mod cell;

pub(crate) use cell::ConfigCell;

/// One route class as the hot path sees it. Indexed by `RouteClass`, whose numbers never
/// change for a limiter's life: a reload keeps the old classes at their places.
#[derive(Clone, Debug)]
pub(crate) struct ClassConfig {
    pub(crate) name: Arc<str>,
    pub(crate) limits: Limits,
    /// The class's limits under the last [`EPOCHS`] profiles, by their [`Tag`] (`limits` at
    /// this config's own): what a word tagged with an older epoch is converted from. Epochs
    /// before the class existed hold its first limits (no word of the class has them).
    pub(crate) history: [Limits; EPOCHS],
    pub(crate) shadow: bool,
    /// An admission that leaves the burst's TAT more than this far ahead of the clock left
    /// less than `observability.near_limit` of the burst: it counts as near the limit.
    pub(crate) near_limit_debt: u64,
    /// `ceil(observability.near_limit * burst tokens)`: fewer tokens left is near the limit
    /// (the Redis backend compares in its own microseconds).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) near_limit_tokens: u64,
    /// The class's leases (Redis backend): the largest, in tokens, and how long one is spent.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) lease: Option<(u32, Duration)>,
}

/// Everything a decision reads, for one profile.
#[derive(Debug)]
pub(crate) struct Config {
    /// Reloads before this config: 0 for a new limiter. Equal to the config cell's generation
    /// once this config is published.
    pub(crate) epoch: u64,
    /// By [`Tag`]: the instant (ns on the limiter's clock) each of the last [`EPOCHS`] profiles
    /// took effect, as of which debts are converted to it (0 for the first).
    pub(crate) since: [u64; EPOCHS],
    pub(crate) classes: Box<[ClassConfig]>,
    pub(crate) capacity: Option<CapacityConfig>,
    pub(crate) profile: Arc<Profile>,
    /// `identities.capacity`: the slots of the embedded table.
    pub(crate) identities: usize,
    /// Each tenant's cap of identity slots (`identities.tenant_share` and the weights).
    pub(crate) identity_caps: IdentityCaps,
    /// `store.timeout`: how long the Redis backend waits for an answer.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) store_timeout: Duration,
    /// The discovery document of this profile.
    pub(crate) published: PublishedLimits,
    /// Metric handles for this profile's classes, registered when it is built.
    #[cfg(feature = "metrics")]
    pub(crate) telemetry: crate::observe::Handles,
}

/// The keyed hasher of a profile's identities (its anonymous prefixes are part of them).
pub(crate) fn key_hasher(profile: &Profile, secret: &[u8]) -> KeyHasher {
    let anon = profile.anonymous;
    KeyHasher::new(secret, anon.ipv4_prefix.get(), anon.ipv6_prefix.get())
}

fn limits(l: &RouteClassLimits) -> Limits {
    Limits {
        burst: Rate::new(l.burst.tokens.get(), l.burst.per.as_nanos()),
        sustained: Rate::new(l.sustained.tokens.get(), l.sustained.per.as_nanos()),
    }
}

/// `k = ceil(share * tokens)`: an admission that leaves fewer than `k` whole tokens of the burst
/// is near the limit. In debt terms (nanoseconds the burst's TAT is ahead of the clock),
/// `floor((tau - debt) / t) < k` exactly when `debt > tau - k * t`: `ClassConfig` keeps that
/// threshold, computed once per profile, so the admitted path compares one integer. A share of
/// 0 gives `k = 0` and the threshold `tau`, which no debt after an admission exceeds.
fn near_limit_tokens(tokens: u64, share: f64) -> u64 {
    // `share` is in [0, 1], so `k` is at most `tokens` and `k * t` at most `tau`. A product
    // within float error of a whole number is that number (0.7 * 10 is 7.000000000000001).
    let x = share * tokens as f64;
    let k = if (x - x.round()).abs() <= 1e-9 * x.max(1.0) {
        x.round()
    } else {
        x.ceil()
    };
    (k as u64).min(tokens)
}

impl Config {
    /// The handle of the class named `name`: its place in `classes`, which reloads keep.
    pub(crate) fn route_class(&self, name: &str) -> Option<RouteClass> {
        self.classes
            .iter()
            .position(|c| &*c.name == name)
            .map(|i| RouteClass(i as u32))
    }

    /// The class of a handle.
    ///
    /// # Panics
    /// If the handle came from another limiter with more classes.
    #[inline]
    pub(crate) fn class(&self, class: RouteClass) -> &ClassConfig {
        match self.classes.get(class.0 as usize) {
            Some(c) => c,
            None => panic!("route class {} does not belong to this limiter", class.0),
        }
    }

    /// This config's tag: what its decisions write into the state word.
    #[inline]
    pub(crate) fn tag(&self) -> Tag {
        Tag::of(self.epoch)
    }

    /// `tats`, written under the epoch that `tag` names (one of this config's last
    /// [`EPOCHS`]), converted to this config's epoch: step by step, each reload's conversion as
    /// of the instant it took effect ([`Limits::convert`]), so the result does not depend on
    /// when it is computed. `class` is the occupant's class, or `None` if it is not known (a
    /// restored slot): then each bucket takes the largest debt any class would give, which
    /// never grants.
    #[cold]
    #[inline(never)]
    pub(crate) fn convert(&self, class: Option<usize>, tats: Tats, tag: Tag) -> Tats {
        let back = (self.epoch as usize + EPOCHS - tag.index()) % EPOCHS;
        let mut tats = tats;
        for to in self.epoch.saturating_sub(back as u64) + 1..=self.epoch {
            let (from, at) = (Tag::of(to - 1).index(), self.since[Tag::of(to).index()]);
            let step =
                |c: &ClassConfig| c.history[from].convert(c.history[Tag::of(to).index()], tats, at);
            tats = match class.and_then(|c| self.classes.get(c)) {
                Some(c) => step(c),
                None => self.classes.iter().map(step).fold(tats, |a, b| Tats {
                    burst: a.burst.max(b.burst),
                    sustained: a.sustained.max(b.sustained),
                }),
            };
        }
        tats
    }

    /// The configuration of a new limiter: classes in profile order. `per_tenant` registers
    /// per-tenant counters for the listed tenants (feature `metrics`).
    pub(crate) fn new(profile: Profile, hasher: &KeyHasher, per_tenant: bool) -> Config {
        let order: Vec<String> = profile
            .route_classes
            .iter()
            .map(|(k, _)| k.to_owned())
            .collect();
        Config::with_order(profile, &order, hasher, per_tenant)
    }

    /// The configuration after a reload: the old classes keep their numbers, new ones follow.
    /// Refuses a profile that drops a class (a caller may hold its handle), resizes the table
    /// or changes the anonymous prefixes.
    pub(crate) fn reload(
        &self,
        profile: Profile,
        hasher: &KeyHasher,
        per_tenant: bool,
    ) -> Result<Config, ProfileError> {
        profile.validate()?;
        let old = &self.profile;
        if profile.identities.capacity != old.identities.capacity {
            return Err(ProfileError::refused(format!(
                "identities.capacity: cannot change from {} to {} on reload; the table is \
                 allocated once: build a new Limiter to resize it",
                old.identities.capacity.get(),
                profile.identities.capacity.get()
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
        // The profile in force lists its classes in handle order, so that a class's position
        // in it is its handle wherever the profile is read (the RLS server's rules, the HTTP
        // answers), whatever order the reloaded profile's author chose.
        let mut profile = profile;
        profile.route_classes.reorder(&order);
        let mut new = Config::with_order(profile, &order, hasher, per_tenant);
        new.epoch = self.epoch + 1;
        // Until the limiter sets it (`Config::take_effect`), as of the previous profile's.
        new.since = self.since;
        new.since[new.tag().index()] = self.since[self.tag().index()];
        let tag = new.tag().index();
        for (new, old) in new.classes.iter_mut().zip(self.classes.iter()) {
            let limits = new.limits;
            new.history = old.history;
            new.history[tag] = limits;
        }
        if let (Some(old), Some(new)) = (&self.capacity, &mut new.capacity) {
            if (old.shards, old.window_ns) == (new.shards, new.window_ns) {
                new.counters = old.counters.clone();
            }
        }
        Ok(new)
    }

    /// The instant this config's profile takes effect: debts are converted to it as of `at`.
    /// Set by the reload just before it publishes the config.
    pub(crate) fn take_effect(&mut self, at: u64) {
        self.since[self.tag().index()] = at;
    }

    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn with_order(
        profile: Profile,
        order: &[String],
        hasher: &KeyHasher,
        per_tenant: bool,
    ) -> Config {
        let classes: Box<[ClassConfig]> = order
            .iter()
            .map(|name| {
                let l = profile.route_classes.get(name).expect("validated");
                let limits = limits(l);
                let near =
                    near_limit_tokens(l.burst.tokens.get(), profile.observability.near_limit.get());
                ClassConfig {
                    name: name.as_str().into(),
                    near_limit_debt: limits.burst.tau - near * limits.burst.t,
                    near_limit_tokens: near,
                    limits,
                    history: [limits; EPOCHS],
                    shadow: l.mode.unwrap_or(profile.mode) == Mode::Shadow,
                    // max_tokens is at most a bucket's tokens and a shard's slots (2^24).
                    lease: l.lease.map(|p| {
                        let most = u32::try_from(p.max_tokens.get()).unwrap_or(u32::MAX);
                        (most, p.ttl.get())
                    }),
                }
            })
            .collect();
        let capacity = profile.shared_capacity.as_ref().map(|sc| {
            let slots = sc.slots_per_window.get();
            CapacityConfig {
                shards: sc.shards.get(),
                window_ns: sc.window.as_nanos(),
                slots_per_window: slots,
                default_cap: CapacityConfig::cap(slots, sc.tenant_share.get(), 1.0),
                listed: sc
                    .tenants
                    .iter()
                    .map(|(name, t)| {
                        let cap = CapacityConfig::cap(slots, sc.tenant_share.get(), t.weight.get());
                        (hasher.tenant_digest(Some(name)), (t.shard, cap))
                    })
                    .collect(),
                counters: (0..sc.shards.get()).map(|_| ShardCounter::new()).collect(),
            }
        });
        #[cfg(feature = "metrics")]
        let telemetry = {
            let listed = profile
                .shared_capacity
                .as_ref()
                .filter(|_| per_tenant)
                .map(|s| s.tenants.iter())
                .into_iter()
                .flatten()
                .map(|(n, _)| (hasher.tenant_digest(Some(n)), n));
            crate::observe::Handles::new(
                classes.iter().map(|c| (&*c.name, c.shadow)),
                listed,
                profile
                    .error_budget
                    .map(|b| (b.capacity_rejections.get(), b.window.get())),
            )
        };
        let identity_caps = IdentityCaps::new(
            profile.identities.capacity.get(),
            profile.identities.tenant_share.get(),
            profile
                .shared_capacity
                .iter()
                .flat_map(|s| s.tenants.iter())
                .map(|(n, t)| (hasher.tenant_digest(Some(n)), t.weight.get())),
        );
        Config {
            epoch: 0,
            since: [0; EPOCHS],
            published: published(&profile, &classes),
            identity_caps,
            identities: profile.identities.capacity.get() as usize,
            store_timeout: profile.store.timeout.get(),
            classes,
            capacity,
            profile: Arc::new(profile),
            #[cfg(feature = "metrics")]
            telemetry,
        }
    }
}

/// The discovery document of `profile`, its classes in handle order.
fn published(p: &Profile, classes: &[ClassConfig]) -> PublishedLimits {
    let bucket = |b: &crate::profile::BucketLimit| PublishedBucket {
        tokens: b.tokens.get(),
        per: b.per,
    };
    PublishedLimits {
        profile: p.name.clone(),
        mode: p.mode,
        route_classes: classes
            .iter()
            .map(|c| {
                let l = p.route_class(&c.name).expect("config follows profile");
                PublishedClass {
                    name: c.name.to_string(),
                    mode: if c.shadow {
                        Mode::Shadow
                    } else {
                        Mode::Enforce
                    },
                    burst: bucket(&l.burst),
                    sustained: bucket(&l.sustained),
                    routes: p
                        .routes
                        .iter()
                        .filter(|r| r.class == *c.name)
                        .map(|r| PublishedRoute {
                            method: r.method.clone(),
                            path: r.path.clone(),
                        })
                        .collect(),
                }
            })
            .collect(),
        retry_after_max: p.retry_after.max,
        catalog: p.catalog.clone(),
        shared_capacity: p
            .shared_capacity
            .as_ref()
            .map(|s| PublishedCapacity { window: s.window }),
        // Set by a fleet reload (`Engine::reload_as`), after the document is derived.
        profile_version: None,
    }
}
