//! The limiter: profile, clock, key secret, table and shared capacity behind `admit`.

use core::fmt;
use core::time::Duration;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use crate::bucket::{Limits, Tats};
use crate::capacity::{self, ShardCounter};
use crate::config::{CapacityConfig, ClassConfig, Config, ConfigCell};
use crate::decision::{Cause, Decision};
use crate::identity::{Digest, Key, KeyHasher, RouteClass};
use crate::profile::{Catalog, Mode, Period, Profile, ProfileError};
use crate::table::{Apply, Table, TAT_BITS};

/// The clock stops here (34 years after the limiter was built) so that a TAT, at most one
/// period ahead of the clock, always fits in the table's 60 bits.
const MAX_NOW: u64 = (1 << TAT_BITS) - (1 << 56);

/// The admission engine. `Send + Sync`: share it by `&` or `Arc`.
///
/// ```
/// use tollgate::{Decision, Key, Limiter, Profile};
///
/// let profile = Profile::from_yaml(r#"
/// name: demo
/// identities: { capacity: 1024 }
/// route_classes:
///   write:
///     burst:     { tokens: 2,    per: 1s }
///     sustained: { tokens: 1200, per: 1h }
/// "#)?;
/// let limiter = Limiter::builder(profile).build()?;
/// let write = limiter.route_class("write").unwrap();
/// let key = Key::authenticated("acme", "alice", write)?;
/// assert_eq!(limiter.admit(&key), Decision::Admit);
/// assert_eq!(limiter.admit(&key), Decision::Admit);
/// assert!(matches!(limiter.admit(&key), Decision::Throttle { .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Limiter {
    table: Table,
    /// Swapped whole by `reload`; `admit` reads one snapshot.
    config: ConfigCell,
    hasher: KeyHasher,
    clock: quanta::Clock,
    /// The clock's raw reading when the limiter was built: time zero of every TAT.
    epoch: u64,
    /// Serialises reloads (never taken by `admit`).
    reload_lock: Mutex<()>,
    #[cfg(feature = "metrics")]
    observer: crate::observe::Observer,
}

/// What `admit` decided and what the profile computed: they differ only in shadow mode, where
/// every request is admitted and the refusal it would have had is reported instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// What the caller gets.
    pub decision: Decision,
    /// What the profile says: in enforce mode the same as `decision`.
    pub computed: Decision,
}

impl Verdict {
    /// True when a refusal was not enforced (shadow mode).
    pub fn is_shadowed(&self) -> bool {
        self.decision != self.computed
    }
}

/// One caller's tokens left, per bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remaining {
    /// Whole tokens in the burst bucket.
    pub burst: u64,
    /// Whole tokens in the sustained bucket.
    pub sustained: u64,
}

/// Builds a [`Limiter`]: `Limiter::builder(profile).clock(c).key_secret(s).build()`.
pub struct Builder {
    profile: Profile,
    clock: Option<quanta::Clock>,
    secret: Option<Vec<u8>>,
    #[cfg(feature = "metrics")]
    observe: crate::observe::Options,
}

/// Why a limiter could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// `key_secret` was given an empty secret.
    EmptySecret,
    /// The identity table could not be allocated.
    OutOfMemory {
        /// The bytes that were asked for.
        bytes: usize,
    },
    /// The profile is invalid (built or changed in Rust): the same refusal as
    /// parsing it would give, kind [`Invalid`](crate::profile::ProfileErrorKind::Invalid).
    Profile(ProfileError),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::EmptySecret => f.write_str("key secret must not be empty"),
            BuildError::OutOfMemory { bytes } => {
                write!(f, "cannot allocate the identity table ({bytes} bytes)")
            }
            BuildError::Profile(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Profile(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ProfileError> for BuildError {
    fn from(e: ProfileError) -> Self {
        BuildError::Profile(e)
    }
}

impl Builder {
    /// The clock (default `quanta::Clock::new()`). Tests pass `quanta::Clock::mock()` and move
    /// time with its handle.
    pub fn clock(mut self, clock: quanta::Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The secret that keys identity digests (default: random per limiter). Processes that must
    /// agree on digests, such as workers sharing Redis, set the same secret.
    pub fn key_secret(mut self, secret: &[u8]) -> Self {
        self.secret = Some(secret.to_vec());
        self
    }

    /// Counts decisions per listed tenant too (`tollgate_tenant_decisions_total{tenant}`; the
    /// profile's `shared_capacity.tenants`, every other tenant as `other`). Off by default:
    /// operators opt in to tell one tenant's retry storm from real growth.
    #[cfg(feature = "metrics")]
    pub fn per_tenant_metrics(mut self, on: bool) -> Self {
        self.observe.per_tenant = on;
        self
    }

    /// Called when the share of capacity refusals crosses `error_budget.capacity_rejections`
    /// (and again when it falls back), besides the gauge and the `tracing` warning.
    #[cfg(feature = "metrics")]
    pub fn on_error_budget(
        mut self,
        callback: impl Fn(&crate::observe::BudgetAlert) + Send + Sync + 'static,
    ) -> Self {
        self.observe.callback = Some(Arc::new(callback));
        self
    }

    /// Validates the profile, allocates the table and starts the clock.
    pub fn build(self) -> Result<Limiter, BuildError> {
        self.profile.validate()?;
        let secret = match self.secret {
            Some(s) if s.is_empty() => return Err(BuildError::EmptySecret),
            Some(s) => s,
            None => random_secret(),
        };
        let capacity = self.profile.identities.capacity.get() as usize;
        let bytes = capacity.saturating_mul(64);
        // Ask first, so that a capacity the machine cannot hold is an error, not an abort.
        let mut probe: Vec<u8> = Vec::new();
        probe
            .try_reserve_exact(bytes)
            .map_err(|_| BuildError::OutOfMemory { bytes })?;
        drop(probe);
        let clock = self.clock.unwrap_or_default();
        let anon = self.profile.anonymous;
        let hasher = KeyHasher::new(&secret, anon.ipv4_prefix.get(), anon.ipv6_prefix.get());
        #[allow(unused_mut)]
        let mut config = Config::new(self.profile, |t| hasher.tenant_digest(Some(t)));
        #[cfg(feature = "metrics")]
        {
            let handles = crate::observe::Handles::new(&config, &hasher, self.observe.per_tenant);
            config.telemetry = Some(handles);
        }
        Ok(Limiter {
            table: Table::new(capacity),
            #[cfg(feature = "metrics")]
            observer: crate::observe::Observer::new(self.observe),
            config: ConfigCell::new(config),
            hasher,
            epoch: clock.raw(),
            clock,
            reload_lock: Mutex::new(()),
        })
    }
}

/// 32 bytes from the OS-seeded hasher of the standard library.
pub(crate) fn random_secret() -> Vec<u8> {
    let s = RandomState::new();
    (0..4u64)
        .flat_map(|i| s.hash_one(i).to_le_bytes())
        .collect()
}

impl Limiter {
    /// Starts building a limiter for `profile`.
    pub fn builder(profile: Profile) -> Builder {
        Builder {
            profile,
            clock: None,
            secret: None,
            #[cfg(feature = "metrics")]
            observe: Default::default(),
        }
    }

    /// The handle of a route class, or `None` if the profile has no such class. Handles stay
    /// valid across reloads (a reload cannot remove a class).
    pub fn route_class(&self, name: &str) -> Option<RouteClass> {
        self.config.load().route_class(name)
    }

    /// Decides one request and charges it if admitted: a token from each of the caller's two
    /// buckets and a slot of its shard, all or nothing.
    ///
    /// # Panics
    /// If `key`'s route class came from another limiter with more classes.
    #[inline]
    pub fn admit(&self, key: &Key<'_>) -> Decision {
        // The clock first: reading the TSC takes longer than hashing, and neither needs the other.
        let raw = self.clock.raw();
        let cfg = self.config.get();
        let (computed, shadow) = self.decide(&cfg, key, raw);
        if shadow {
            Decision::Admit
        } else {
            computed
        }
    }

    /// [`Limiter::admit`], also telling what the profile computed when shadow mode let a
    /// refused request through.
    #[inline]
    pub fn evaluate(&self, key: &Key<'_>) -> Verdict {
        let raw = self.clock.raw();
        let cfg = self.config.get();
        let (computed, shadow) = self.decide(&cfg, key, raw);
        let decision = if shadow { Decision::Admit } else { computed };
        Verdict { decision, computed }
    }

    /// The decision the profile computes, charged if admitted, and whether the class is in
    /// shadow mode (the caller then admits regardless).
    #[inline]
    fn decide(&self, cfg: &Config, key: &Key<'_>, raw: u64) -> (Decision, bool) {
        let class = class_of(cfg, key.class);
        let limits = class.limits;
        let (digest, tenant) = self.hasher.digests(key);
        let now = self.nanos_since_epoch(raw);
        let charged = self.table.update(digest, now, |tats| {
            let tats_now = limits.clamp(tats, now);
            match limits.charge(tats_now, now) {
                Ok(next) => Apply::Write(next, Decision::Admit),
                Err(short) => {
                    let throttle = Decision::Throttle {
                        retry_after: Duration::from_nanos(short.wait),
                        bucket: short.bucket,
                    };
                    // Nothing is charged; only a debt beyond a reloaded, smaller bucket is
                    // written down as the clamp (never under unchanged limits). Written at a
                    // fresh clock reading: `now` may predate a concurrent admit that left the
                    // TAT up to `tau` past *its* clock, and clamping to a stale `now` would
                    // erase that debt (loom: `stale_clock_reading_never_returns_credit`). The
                    // clamp only grows with the time, so the clock is read again only when the
                    // stale one would have changed something.
                    if tats_now == tats {
                        return Apply::Keep(throttle);
                    }
                    let clamped = limits.clamp(tats, self.now().max(now));
                    if clamped == tats {
                        Apply::Keep(throttle)
                    } else {
                        Apply::Write(clamped, throttle)
                    }
                }
            }
        });
        let computed = match charged {
            Ok(Decision::Admit) => match &cfg.capacity {
                None => Decision::Admit,
                Some(cap) => match self.take_capacity(cap, tenant, key, now) {
                    Ok(()) => Decision::Admit,
                    Err(refused) => {
                        self.refund(digest, limits, now);
                        refused
                    }
                },
            },
            Ok(throttle) => throttle,
            // No slot: fail closed. No wait is given, since when a slot frees depends on other
            // callers' buckets.
            Err(_) => Decision::Unavailable {
                retry_after: None,
                cause: Cause::TableFull,
            },
        };
        #[cfg(feature = "metrics")]
        if let Some(handles) = &cfg.telemetry {
            self.observer
                .record(handles, &self.hasher, key, computed, now);
        }
        (computed, class.shadow)
    }

    /// What [`Limiter::admit`] would answer now, charging nothing.
    pub fn peek(&self, key: &Key<'_>) -> Decision {
        let cfg = self.config.load();
        let class = class_of(&cfg, key.class);
        let now = self.now();
        let (digest, tenant) = self.hasher.digests(key);
        let tats = self.table.peek(digest, now).unwrap_or(Tats::full(now));
        let computed = match class.limits.charge(class.limits.clamp(tats, now), now) {
            Err(short) => Decision::Throttle {
                retry_after: Duration::from_nanos(short.wait),
                bucket: short.bucket,
            },
            Ok(_) => match &cfg.capacity {
                None => Decision::Admit,
                Some(cap) => self
                    .capacity_left(cap, tenant, key, now)
                    .err()
                    .unwrap_or(Decision::Admit),
            },
        };
        if class.shadow {
            Decision::Admit
        } else {
            computed
        }
    }

    /// Swaps in a new profile without losing any bucket state. The new limits apply from the
    /// next decision; what carries over is each bucket's time to refill, capped at the new
    /// bucket's size ("clamp to the new capacity": a full bucket stays full, one that owed more
    /// than the new bucket holds is empty, and refills at the new rate). Shard counts in the
    /// current window carry over unless the number of shards or the window changes.
    ///
    /// Refused, with the old profile left in force: an invalid profile (kind `Invalid`, as
    /// parsing it would say), and (kind `Reload`) a profile that drops a route class (callers
    /// may hold its handle), changes `identities.capacity` (the table is allocated once: build a
    /// new limiter) or changes the anonymous prefixes (they are part of anonymous identities).
    pub fn reload(&self, profile: Profile) -> Result<(), ProfileError> {
        let _one_at_a_time = self.reload_lock.lock();
        #[allow(unused_mut)]
        let mut new = self
            .config
            .load()
            .reload(profile, |t| self.hasher.tenant_digest(Some(t)))?;
        #[cfg(feature = "metrics")]
        {
            let per_tenant = self.observer.options.per_tenant;
            new.telemetry = Some(crate::observe::Handles::new(&new, &self.hasher, per_tenant));
        }
        self.config.store(new);
        Ok(())
    }

    /// The effective limits as a discovery document (serve it as JSON, e.g. at
    /// `/.well-known/rate-limits`): per route class its buckets and mode, the Retry-After cap,
    /// the catalog, and the capacity window. No tenant names and no usage figures.
    pub fn published_limits(&self) -> PublishedLimits {
        let cfg = self.config.load();
        let p = &cfg.profile;
        PublishedLimits {
            profile: p.name.clone(),
            mode: p.mode,
            route_classes: cfg
                .classes
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
                        burst: PublishedBucket {
                            tokens: l.burst.tokens.get(),
                            per: l.burst.per,
                        },
                        sustained: PublishedBucket {
                            tokens: l.sustained.tokens.get(),
                            per: l.sustained.per,
                        },
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
        }
    }

    /// Bytes held by the limiter: the table (64 bytes a slot) and its bookkeeping.
    pub fn memory_bytes(&self) -> usize {
        let cfg = self.config.load();
        core::mem::size_of::<Self>() + self.table.memory_bytes() - core::mem::size_of::<Table>()
            + core::mem::size_of_val(&*cfg.classes)
            + cfg.capacity.as_ref().map_or(0, |c| c.counters.len())
                * core::mem::size_of::<ShardCounter>()
    }

    /// Identity slots in the table.
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// The profile in force (a snapshot: a later reload does not change it).
    pub fn profile(&self) -> Arc<Profile> {
        self.config.load().profile.clone()
    }

    /// The caller's own tokens left in each bucket, charging nothing (for the `RateLimit`
    /// header, when the profile opts in to exposing it).
    pub fn remaining(&self, key: &Key<'_>) -> Remaining {
        let cfg = self.config.load();
        let limits = class_of(&cfg, key.class).limits;
        let now = self.now();
        let tats = self
            .table
            .peek(self.hasher.digests(key).0, now)
            .unwrap_or(Tats::full(now));
        let tats = limits.clamp(tats, now);
        Remaining {
            burst: limits.burst.remaining(tats.burst, now),
            sustained: limits.sustained.remaining(tats.sustained, now),
        }
    }

    /// Where a request falls in shared capacity: its tenant's shard and cap, and the window.
    #[inline]
    fn place(cap: &CapacityConfig, tenant: Digest, key: &Key<'_>, now: u64) -> Place {
        let (shard, limit) = Self::shard_and_cap(cap, tenant, key);
        let (window, end) = capacity::window(now, cap.window_ns);
        Place {
            shard,
            limit,
            window,
            end,
            next_window: Some(Duration::from_nanos(end - now)),
        }
    }

    /// The tenant's shard (pinned, or a keyed hash of the tenant) and its cap per window.
    #[inline]
    pub(crate) fn shard_and_cap(
        cap: &CapacityConfig,
        tenant: Digest,
        key: &Key<'_>,
    ) -> (usize, u64) {
        let listed = match key.tenant() {
            Some(_) if !cap.listed.is_empty() => cap.listed.get(&tenant).copied(),
            _ => None,
        };
        let (pinned, limit) = listed.unwrap_or((None, cap.default_cap));
        // A keyed hash of the tenant (its digest's high half, range-reduced) unless pinned.
        let shard = pinned
            .unwrap_or_else(|| ((u128::from(tenant.hi) * u128::from(cap.shards)) >> 64) as u32);
        (shard as usize, limit)
    }

    /// Takes a tenant slot and a shard slot, or neither.
    #[inline]
    fn take_capacity(
        &self,
        cap: &CapacityConfig,
        tenant: Digest,
        key: &Key<'_>,
        now: u64,
    ) -> Result<(), Decision> {
        let Place {
            shard,
            limit,
            window,
            end,
            next_window,
        } = Self::place(cap, tenant, key, now);
        // The tenant first: a tenant over its share never touches the shard's count, so it
        // cannot crowd out its neighbours even for an instant.
        let counted =
            match capacity::take_tenant(&self.table, tenant, now, (end, cap.window_ns), limit) {
                Ok(counted) => counted,
                Err(cause) => {
                    let retry_after = if cause == Cause::TableFull {
                        None
                    } else {
                        next_window
                    };
                    return Err(Decision::Unavailable { retry_after, cause });
                }
            };
        match cap.counters.get(shard) {
            Some(counter) if counter.take(window, cap.slots_per_window) => Ok(()),
            _ => {
                capacity::give_back_tenant(&self.table, tenant, now, counted);
                Err(Decision::Unavailable {
                    retry_after: next_window,
                    cause: Cause::ShardFull,
                })
            }
        }
    }

    /// `take_capacity` without taking: the refusal `admit` would give, if any.
    fn capacity_left(
        &self,
        cap: &CapacityConfig,
        tenant: Digest,
        key: &Key<'_>,
        now: u64,
    ) -> Result<(), Decision> {
        let Place {
            shard,
            limit,
            window,
            end,
            next_window: retry_after,
        } = Self::place(cap, tenant, key, now);
        if capacity::tenant_held(&self.table, tenant, now, end, cap.window_ns) >= limit {
            return Err(Decision::Unavailable {
                retry_after,
                cause: Cause::TenantShare,
            });
        }
        match cap.counters.get(shard) {
            Some(c) if c.used(window) < cap.slots_per_window => Ok(()),
            _ => Err(Decision::Unavailable {
                retry_after,
                cause: Cause::ShardFull,
            }),
        }
    }

    /// Gives back the token `admit` took when capacity then refused. Exact: a charge moves each
    /// TAT to `max(tat, now) + t` and this moves it back by `t`; charges by other requests in
    /// between commute with it.
    #[cold]
    fn refund(&self, digest: Digest, limits: Limits, now: u64) {
        let _ = self.table.update(digest, now, |t| {
            Apply::Write(
                Tats {
                    burst: t.burst.saturating_sub(limits.burst.t),
                    sustained: t.sustained.saturating_sub(limits.sustained.t),
                },
                (),
            )
        });
    }

    /// Nanoseconds since the limiter was built, on its own monotonic clock.
    #[inline]
    fn now(&self) -> u64 {
        self.nanos_since_epoch(self.clock.raw())
    }

    #[inline]
    fn nanos_since_epoch(&self, raw: u64) -> u64 {
        self.clock.delta_as_nanos(self.epoch, raw).min(MAX_NOW)
    }
}

/// A request's place in shared capacity (see `Limiter::place`).
struct Place {
    shard: usize,
    /// The tenant's cap in its shard per window.
    limit: u64,
    window: u64,
    /// The window's end, on the limiter's clock.
    end: u64,
    /// The wait until the next window: the Retry-After of every capacity refusal.
    next_window: Option<Duration>,
}

#[inline]
pub(crate) fn class_of(cfg: &Config, class: RouteClass) -> &ClassConfig {
    match cfg.classes.get(class.0 as usize) {
        Some(c) => c,
        None => panic!("route class {} does not belong to this limiter", class.0),
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("profile", &self.config.load().profile.name)
            .field("capacity", &self.table.capacity())
            .finish_non_exhaustive()
    }
}

/// The discovery document: the effective limits, safe to show to anyone.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PublishedLimits {
    /// The profile's name.
    pub profile: String,
    /// The profile's default mode.
    pub mode: Mode,
    /// Every route class, in handle order.
    pub route_classes: Vec<PublishedClass>,
    /// The cap on Retry-After.
    pub retry_after_max: Period,
    /// The catalog codes and problem types callers may see.
    pub catalog: Catalog,
    /// The shared-capacity window, if there is shared capacity (no usage, no tenants).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_capacity: Option<PublishedCapacity>,
}

/// One route class in the discovery document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PublishedClass {
    /// The class name.
    pub name: String,
    /// Whether refusals are enforced.
    pub mode: Mode,
    /// The burst bucket.
    pub burst: PublishedBucket,
    /// The sustained bucket.
    pub sustained: PublishedBucket,
    /// The routes of the profile that map to this class.
    pub routes: Vec<PublishedRoute>,
}

/// A bucket in the discovery document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PublishedBucket {
    /// Capacity and refill per period.
    pub tokens: u64,
    /// The period.
    pub per: Period,
}

/// A route in the discovery document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PublishedRoute {
    /// HTTP method or `*`.
    pub method: String,
    /// Path glob.
    pub path: String,
}

/// Shared capacity in the discovery document: only its window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PublishedCapacity {
    /// Capacity refusals end at the next window boundary.
    pub window: Period,
}
