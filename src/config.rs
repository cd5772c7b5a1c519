//! The numbers the hot path reads, built from a validated [`Profile`] and swapped whole on
//! reload (behind `arc-swap`), so that one decision never mixes two profiles.

use std::sync::Arc;

use crate::bucket::{Limits, Rate};
use crate::capacity::ShardCounter;
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
    /// The shards' counters: kept across a reload unless the shard count or window changes.
    pub(crate) counters: Arc<[ShardCounter]>,
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
    /// Metric handles for this profile's classes (set by the limiter after building).
    #[cfg(feature = "metrics")]
    pub(crate) telemetry: Option<crate::observe::Handles>,
}

pub(crate) fn limits(l: &RouteClassLimits) -> Limits {
    Limits {
        burst: Rate::new(l.burst.tokens.get(), l.burst.per.as_nanos()),
        sustained: Rate::new(l.sustained.tokens.get(), l.sustained.per.as_nanos()),
    }
}

impl Config {
    /// The handle of the class named `name`: its place in `classes`, which reloads keep.
    pub(crate) fn route_class(&self, name: &str) -> Option<crate::identity::RouteClass> {
        self.classes
            .iter()
            .position(|c| &*c.name == name)
            .map(|i| crate::identity::RouteClass(i as u32))
    }

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
    /// Refuses an invalid profile, and one that drops a class (a caller may hold its handle)
    /// or resizes the table.
    pub(crate) fn reload(
        &self,
        profile: Profile,
        tenant_digest: impl Fn(&str) -> Digest,
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
        let mut new = Config::with_order(profile, &order, tenant_digest);
        if let (Some(old), Some(new)) = (&self.capacity, &mut new.capacity) {
            if (old.shards, old.window_ns) == (new.shards, new.window_ns) {
                new.counters = old.counters.clone();
            }
        }
        Ok(new)
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
                        (tenant_digest(name), (t.shard, cap))
                    })
                    .collect(),
                counters: (0..sc.shards.get()).map(|_| ShardCounter::new()).collect(),
            }
        });
        Config {
            classes,
            capacity,
            profile: Arc::new(profile),
            #[cfg(feature = "metrics")]
            telemetry: None,
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

/// Holds the current [`Config`] and hands it to readers cheaply.
///
/// `ArcSwap::load` costs a few nanoseconds of fences per call, a tenth of an admit. Each thread
/// instead keeps the configs of the last few limiters it used, tagged with the generation they
/// were read at; a read is then two thread-local accesses and one load of the generation, and
/// only a reload (which bumps the generation) sends threads back to the `ArcSwap`. A thread's
/// cache holds at most [`CACHED`] old configs alive, until it next uses those limiters or exits.
///
/// Readers get a guard ([`ConfigRef`]) rather than running a closure: a decision returned out
/// of a closure through the thread-local machinery was copied twice, and each copy stalled on
/// store-to-load forwarding (measured: 10 ns of a 40 ns admit).
pub(crate) struct ConfigCell {
    current: arc_swap::ArcSwap<Config>,
    generation: std::sync::atomic::AtomicU64,
    /// Process-unique, so that a new limiter at a freed address never hits another's cache.
    #[cfg_attr(all(tollgate_loom, feature = "loom"), allow(dead_code))]
    id: u64,
}

/// Limiters whose configs one thread keeps.
const CACHED: usize = 4;

/// One thread's configs, most recently used first.
struct Cache {
    ids: [u64; CACHED],
    generations: [u64; CACHED],
    configs: [Option<Arc<Config>>; CACHED],
}

#[cfg(not(all(tollgate_loom, feature = "loom")))]
std::thread_local! {
    /// Mutated only by the holder of `BUSY` on this thread (see `ConfigCell::get`).
    static CACHE: core::cell::UnsafeCell<Cache> = const {
        core::cell::UnsafeCell::new(Cache {
            ids: [0; CACHED],
            generations: [0; CACHED],
            configs: [None, None, None, None],
        })
    };
    /// True while a `ConfigRef::Cached` of this thread is alive: the cache is then neither
    /// changed nor handed out again (a nested read, from a metrics callback, takes the swap).
    static BUSY: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// A read of the current config: from this thread's cache, or from the swap.
pub(crate) enum ConfigRef<'a> {
    /// Points into an `Arc<Config>` of this thread's cache, which stays put while `BUSY`.
    /// The raw pointer also keeps the guard on its thread (`!Send`).
    #[cfg(not(all(tollgate_loom, feature = "loom")))]
    Cached(*const Config, core::marker::PhantomData<&'a ConfigCell>),
    /// A plain `ArcSwap` snapshot.
    Swapped(
        arc_swap::Guard<Arc<Config>>,
        core::marker::PhantomData<&'a ConfigCell>,
    ),
}

impl core::ops::Deref for ConfigRef<'_> {
    type Target = Config;
    #[inline]
    fn deref(&self) -> &Config {
        match self {
            #[cfg(not(all(tollgate_loom, feature = "loom")))]
            // SAFETY: (1) the pointer came from an `Arc<Config>` held in this thread's cache;
            // (2) that `Arc` is dropped or replaced only by `refresh`, which runs only with
            // `BUSY` taken, and `BUSY` stays taken until this guard is dropped; (3) the guard
            // cannot leave the thread (`*const` is `!Send`), and the cache outlives any guard
            // on its thread. So the `Config` is alive and unchanged for the guard's life.
            ConfigRef::Cached(ptr, _) => unsafe { &**ptr },
            ConfigRef::Swapped(guard, _) => guard,
        }
    }
}

#[cfg(not(all(tollgate_loom, feature = "loom")))]
impl Drop for ConfigRef<'_> {
    #[inline]
    fn drop(&mut self) {
        if let ConfigRef::Cached(..) = self {
            // During thread teardown there is nothing left to release.
            let _ = BUSY.try_with(|b| b.set(false));
        }
    }
}

impl ConfigCell {
    pub(crate) fn new(config: Config) -> ConfigCell {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        ConfigCell {
            current: arc_swap::ArcSwap::from_pointee(config),
            generation: std::sync::atomic::AtomicU64::new(0),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// A snapshot to keep (off the hot path).
    pub(crate) fn load(&self) -> arc_swap::Guard<Arc<Config>> {
        self.current.load()
    }

    /// Installs a new config (the caller serialises reloads).
    pub(crate) fn store(&self, config: Config) {
        self.current.store(Arc::new(config));
        // Release: a reader that sees the new generation then loads the new config.
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// The current config, for the hot path.
    #[inline]
    pub(crate) fn get(&self) -> ConfigRef<'_> {
        #[cfg(not(all(tollgate_loom, feature = "loom")))]
        {
            // Take BUSY; if it was taken (a nested read on this thread), use the swap.
            if let Ok(false) = BUSY.try_with(|b| b.replace(true)) {
                // Acquire: pairs with the Release bump in `store`, after the new config.
                let generation = self.generation.load(std::sync::atomic::Ordering::Acquire);
                let cached = CACHE.try_with(|cache| {
                    // SAFETY: we hold BUSY, so no other reference into the cache exists on
                    // this thread (no live `ConfigRef::Cached`, no `get` in progress), and the
                    // cache is thread-local, so no other thread can reach it.
                    let cache = unsafe { &mut *cache.get() };
                    if cache.ids[0] != self.id || cache.generations[0] != generation {
                        self.refresh(cache, generation);
                    }
                    cache.configs[0].as_ref().map(Arc::as_ptr)
                });
                if let Ok(Some(ptr)) = cached {
                    return ConfigRef::Cached(ptr, core::marker::PhantomData);
                }
                let _ = BUSY.try_with(|b| b.set(false));
            }
        }
        ConfigRef::Swapped(self.current.load(), core::marker::PhantomData)
    }

    /// Moves this limiter's entry to the front of the thread's cache, fresh.
    #[cold]
    #[cfg(not(all(tollgate_loom, feature = "loom")))]
    fn refresh(&self, cache: &mut Cache, generation: u64) {
        let i = cache
            .ids
            .iter()
            .position(|&id| id == self.id)
            .unwrap_or(CACHED - 1);
        cache.ids[..=i].rotate_right(1);
        cache.generations[..=i].rotate_right(1);
        cache.configs[..=i].rotate_right(1);
        let stale = cache.ids[0] != self.id || cache.generations[0] != generation;
        if stale || cache.configs[0].is_none() {
            cache.ids[0] = self.id;
            cache.generations[0] = generation;
            cache.configs[0] = Some(self.current.load_full());
        }
    }
}
