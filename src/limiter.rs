//! The embedded backend: the engine core over an in-process table of buckets and tenant
//! counts, on the limiter's own monotonic clock.

use core::fmt;
use std::sync::Arc;

use crate::bucket::{Cost, Tats};
use crate::capacity::{Partition, Taken, Tenants};
use crate::config::Config;
use crate::decision::{Cause, Decision, Remaining};
use crate::engine::{Engine, Verdict};
use crate::identity::{Digest, Key, RouteClass};
use crate::profile::{Profile, ProfileError};
use crate::published::PublishedLimits;
use crate::snapshot::WallClock;
use crate::table::{Apply, Stamp, Table, Tag, EPOCHS, MAX_NOW};

mod builder;
mod coarse_clock;

pub use builder::{BuildError, Builder, KEY_SECRET_ENV};

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
    /// Config, hasher, reload, shadow mode, metrics: what the Redis backend shares.
    pub(crate) engine: Engine,
    /// Where this backend keeps bucket state.
    pub(crate) table: Table,
    /// Per tenant: its shared-capacity window and how many identity slots it holds.
    pub(crate) tenants: Tenants,
    clock: quanta::Clock,
    /// The clock's raw reading when the limiter was built: time zero of every TAT.
    epoch: u64,
    /// The wall clock that snapshots are dated by (`crate::snapshot`).
    pub(crate) wall: WallClock,
    /// If the builder opted in: the time every decision reads instead of `clock`.
    coarse: Option<coarse_clock::CoarseClock>,
}

/// Which item of [`Limiter::admit_all`] (or [`Admission::admit_all`](crate::Admission::admit_all))
/// refused, and how; every item before it was given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The refused item's index in the slice.
    pub index: usize,
    /// Its refusal (never [`Decision::Admit`]).
    pub decision: Decision,
}

/// What one charge took, to give it back exactly.
#[derive(Clone, Copy, Debug)]
struct Receipt {
    digest: Digest,
    tenant: Digest,
    /// The route class and the tokens charged: given back in the emission intervals of the
    /// epoch the state word is in by then (a reload may have come between).
    class: usize,
    tokens: u64,
    slots: u64,
    capacity: Option<Taken>,
}

/// A charge's refusal, or the news that a newer profile was published since the config the
/// decision holds (the state word may be counted in it): decide again under the newest.
#[derive(Clone, Copy, Debug)]
enum Refusal {
    Decided(Decision),
    Stale,
}

impl From<Decision> for Refusal {
    #[inline]
    fn from(d: Decision) -> Refusal {
        Refusal::Decided(d)
    }
}

/// A newer profile than the decision's was published (see [`Refusal::Stale`]).
#[derive(Clone, Copy, Debug)]
struct Stale;

impl Limiter {
    /// The handle of a route class, or `None` if the profile has no such class. Handles stay
    /// valid across reloads (a reload cannot remove a class).
    pub fn route_class(&self, name: &str) -> Option<RouteClass> {
        self.engine.route_class(name)
    }

    /// Decides one request and charges it if admitted: a token from each of the caller's two
    /// buckets and a slot of its shard, all or nothing.
    ///
    /// # Panics
    /// If `key`'s route class came from another limiter with more classes.
    #[inline]
    pub fn admit(&self, key: &Key<'_>) -> Decision {
        // The clock first: reading the TSC takes longer than hashing, and neither needs the other.
        let now = self.now();
        let cfg = self.engine.config.get();
        self.decide(&cfg, key, now).decision
    }

    /// [`Limiter::admit`], also telling what the profile computed when shadow mode let a
    /// refused request through.
    #[inline]
    pub fn evaluate(&self, key: &Key<'_>) -> Verdict {
        let now = self.now();
        let cfg = self.engine.config.get();
        self.decide(&cfg, key, now)
    }

    /// Decides one request of weighted cost `n` and charges it if admitted: `n` tokens from
    /// each of the caller's two buckets and `n` slots of its shard, all or nothing, in the one
    /// compare-and-swap [`Limiter::admit`] uses (`admit_n(key, 1)` is `admit(key)`).
    ///
    /// * `n = 0` checks without charging: the answer `admit` would give now (a throttle if
    ///   not even one token is left), with nothing taken. This is what Envoy's per-descriptor
    ///   `hits_addend: 0` asks. Unlike [`Limiter::peek`] it is counted in metrics and follows
    ///   shadow mode.
    /// * `n` larger than either bucket of the route class holds when full is
    ///   [`Decision::Exceeds`]: nothing is charged and no wait is given, since none would help.
    /// * With shared capacity, a cost larger than the tenant's share or the shard's slots of
    ///   one window is [`Decision::Unavailable`] with no `retry_after`, for the same reason.
    ///
    /// # Panics
    /// If `key`'s route class came from another limiter with more classes.
    #[inline]
    pub fn admit_n(&self, key: &Key<'_>, n: u32) -> Decision {
        self.evaluate_n(key, n).decision
    }

    /// [`Limiter::admit_n`], also telling what the profile computed when shadow mode let a
    /// refused request through.
    pub fn evaluate_n(&self, key: &Key<'_>, n: u32) -> Verdict {
        let now = self.now();
        let cfg = self.engine.config.get();
        self.decide_n(&cfg, key, n, now)
    }

    /// [`Limiter::evaluate_n`] on `cfg` at `now`.
    fn decide_n(&self, cfg: &Config, key: &Key<'_>, n: u32, now: u64) -> Verdict {
        let class = cfg.class(key.class);
        let computed = match self.charge_n(cfg, key, n, now) {
            Ok(_) => Decision::Admit,
            Err(Refusal::Decided(refused)) => refused,
            Err(Refusal::Stale) => {
                return self.decide_n(&self.engine.config.load(), key, n, self.now());
            }
        };
        self.engine.conclude(cfg, class.shadow, key, computed, now)
    }

    /// Admits every `(key, n)` of `items` (as [`Limiter::admit_n`], in order), or none: at the
    /// first refusal, the tokens and shard slots already charged for the items before it are
    /// given back exactly, and the refusal says which item it was. For a request that several
    /// limits must all allow (Envoy sends several descriptors). All items are decided on one
    /// reading of the clock and one snapshot of the profile.
    ///
    /// Metrics count each decided item's own answer (an item given back still counts as
    /// admitted; the items after the refusal are not decided, nor counted). An item in shadow
    /// mode never refuses, as with `admit`.
    pub fn admit_all(&self, items: &[(Key<'_>, u32)]) -> Result<(), Refused> {
        const INLINE: usize = 8;
        if items.len() <= INLINE {
            let mut receipts = [None; INLINE];
            self.admit_all_into(items, &mut receipts)
        } else {
            let mut receipts = vec![None; items.len()];
            self.admit_all_into(items, &mut receipts)
        }
    }

    /// [`Limiter::admit_all`] keeping what each charge took in `receipts` (at least one per item).
    fn admit_all_into(
        &self,
        items: &[(Key<'_>, u32)],
        receipts: &mut [Option<Receipt>],
    ) -> Result<(), Refused> {
        let now = self.now();
        let cfg = self.engine.config.get();
        match self.admit_all_on(&cfg, now, items, receipts) {
            Ok(result) => result,
            Err(Stale) => loop {
                if let Ok(result) =
                    self.admit_all_on(&self.engine.config.load(), self.now(), items, receipts)
                {
                    return result;
                }
            },
        }
    }

    /// [`Limiter::admit_all_into`] on `cfg` at `now`; `Err(Stale)`, with everything charged
    /// given back, if a newer profile was published meanwhile (metrics then count the items
    /// decided before it twice, once per try).
    fn admit_all_on(
        &self,
        cfg: &Config,
        now: u64,
        items: &[(Key<'_>, u32)],
        receipts: &mut [Option<Receipt>],
    ) -> Result<Result<(), Refused>, Stale> {
        for (index, (key, n)) in items.iter().enumerate() {
            let class = cfg.class(key.class);
            let (receipt, computed) = match self.charge_n(cfg, key, *n, now) {
                Ok(receipt) => (receipt, Decision::Admit),
                Err(Refusal::Decided(refused)) => (None, refused),
                Err(Refusal::Stale) => {
                    for r in receipts[..index].iter().flatten() {
                        self.give_back(cfg, *r);
                    }
                    return Err(Stale);
                }
            };
            let verdict = self.engine.conclude(cfg, class.shadow, key, computed, now);
            receipts[index] = receipt;
            if !verdict.decision.is_admit() {
                for r in receipts[..index].iter().flatten() {
                    self.give_back(cfg, *r);
                }
                return Ok(Err(Refused {
                    index,
                    decision: verdict.decision,
                }));
            }
        }
        Ok(Ok(()))
    }

    /// The decision against this limiter's table, charged if admitted, concluded by the engine.
    #[inline]
    fn decide(&self, cfg: &Config, key: &Key<'_>, now: u64) -> Verdict {
        let class = cfg.class(key.class);
        let computed = match self.charge(cfg, key, class.limits.unit(), 1, now) {
            Ok(_) => Decision::Admit,
            Err(Refusal::Decided(refused)) => refused,
            Err(Refusal::Stale) => return self.decide_again(key),
        };
        self.engine.conclude(cfg, class.shadow, key, computed, now)
    }

    /// [`Limiter::decide`] under the newest profile, on a fresh clock reading (one taken after
    /// the new profile took effect), when a reload came between the first try's config and
    /// its state word.
    #[cold]
    #[inline(never)]
    fn decide_again(&self, key: &Key<'_>) -> Verdict {
        self.decide(&self.engine.config.load(), key, self.now())
    }

    /// [`Limiter::charge`] of `n` tokens and slots: `None` for `n = 0` (checked only, nothing
    /// charged), the refusal of a cost no bucket of the class can hold.
    fn charge_n(
        &self,
        cfg: &Config,
        key: &Key<'_>,
        n: u32,
        now: u64,
    ) -> Result<Option<Receipt>, Refusal> {
        let limits = cfg.class(key.class).limits;
        if n == 0 {
            return match self.check(cfg, key, now) {
                Ok(Decision::Admit) => Ok(None),
                Ok(refused) => Err(refused.into()),
                Err(Stale) => Err(Refusal::Stale),
            };
        }
        let cost = limits
            .cost(n)
            .map_err(|bucket| Decision::Exceeds { bucket })?;
        self.charge(cfg, key, cost, n.into(), now).map(Some)
    }

    /// Charges `cost` to the caller's buckets and `slots` of shared capacity, all or nothing
    /// (a capacity refusal gives the tokens back); what was taken, or the refusal.
    #[inline]
    fn charge(
        &self,
        cfg: &Config,
        key: &Key<'_>,
        cost: Cost,
        slots: u64,
        now: u64,
    ) -> Result<Receipt, Refusal> {
        let limits = cfg.class(key.class).limits;
        let (digest, tenant) = self.engine.hasher.digests(key);
        let class = key.class.index() as usize;
        // Consulted only if the identity must claim a slot (the cold path).
        let partition = Partition {
            tenants: &self.tenants,
            caps: &cfg.identity_caps,
            tenant,
        };
        let stamp = Stamp {
            tag: cfg.tag(),
            class: Some(class),
        };
        let charged = self
            .table
            .update_stamped(digest, &partition, now, stamp, |stored, tag| {
                let Ok(stored) = self.in_epoch(cfg, class, stored, tag) else {
                    return Apply::Keep(Err(None));
                };
                // A refusal writes nothing, after a reload too (a word of an older epoch is left
                // as it is: its conversion does not depend on when it is made).
                match limits.charge(stored, now, cost) {
                    Ok(next) => Apply::Write(next, Ok(next.burst)),
                    Err(short) => Apply::Keep(Err(Some(short))),
                }
            });
        let receipt = |capacity| Receipt {
            digest,
            tenant,
            class,
            tokens: slots,
            slots,
            capacity,
        };
        let admitted = |burst: u64, capacity| {
            // Near the limit: the burst left after this admission is below the profile's
            // share (one comparison; see `config::near_limit_tokens`).
            if burst - now > cfg.class(key.class).near_limit_debt {
                self.engine.near_limit(cfg, key);
            }
            Ok(receipt(capacity))
        };
        match charged {
            Ok(Ok(burst)) => match &cfg.capacity {
                None => admitted(burst, None),
                Some(cap) => match cap.take(&self.tenants, tenant, key, now, slots) {
                    Ok(taken) => admitted(burst, Some(taken)),
                    Err(refused) => {
                        self.refund(cfg, &receipt(None));
                        Err(refused.into())
                    }
                },
            },
            Ok(Err(Some(short))) => Err(short.throttle().into()),
            // A newer profile was published (`Limiter::in_epoch`).
            Ok(Err(None)) => Err(Refusal::Stale),
            // No slot: fail closed. No wait is given, since when a slot frees depends on other
            // callers' buckets.
            Err(_) => Err(Decision::Unavailable {
                retry_after: None,
                cause: Cause::TableFull,
            }
            .into()),
        }
    }

    /// A state word's TATs counted in `cfg`'s epoch (converted from an older one if the word
    /// is tagged with it), or [`Stale`] if a profile newer than `cfg` was published: the word
    /// may be counted in that one. The hot path: one load of the generation (a line only a
    /// reload writes, just read by `ConfigCell::get`), two compares.
    #[inline]
    fn in_epoch(&self, cfg: &Config, class: usize, tats: Tats, tag: Tag) -> Result<Tats, Stale> {
        if self.engine.config.latest() > cfg.epoch {
            return Err(Stale);
        }
        if tag == cfg.tag() {
            Ok(tats)
        } else {
            Ok(cfg.convert(Some(class), tats, tag))
        }
    }

    /// The caller's TATs counted in `cfg`'s epoch, reading nothing but its slot (full at `now`
    /// if it has none).
    fn view(&self, cfg: &Config, key: &Key<'_>, now: u64) -> Result<Tats, Stale> {
        let class = key.class.index() as usize;
        match self.table.peek_stamped(self.engine.hasher.digests(key).0) {
            None => Ok(Tats::full(now)),
            Some((tats, tag)) => self.in_epoch(cfg, class, tats, tag),
        }
    }

    /// What a charge of one token would answer at `now`, charging nothing (and claiming no
    /// slot: a caller with none has full buckets).
    fn check(&self, cfg: &Config, key: &Key<'_>, now: u64) -> Result<Decision, Stale> {
        let limits = cfg.class(key.class).limits;
        let tats = self.view(cfg, key, now)?;
        Ok(match limits.charge(tats, now, limits.unit()) {
            Err(short) => short.throttle(),
            Ok(_) => match &cfg.capacity {
                None => Decision::Admit,
                Some(cap) => cap
                    .peek(&self.tenants, self.engine.hasher.digests(key).1, key, now)
                    .err()
                    .unwrap_or(Decision::Admit),
            },
        })
    }

    /// What [`Limiter::admit`] would answer now, charging nothing.
    pub fn peek(&self, key: &Key<'_>) -> Decision {
        loop {
            let cfg = self.engine.config.load();
            let class = cfg.class(key.class);
            if let Ok(d) = self.check(&cfg, key, self.now()) {
                return Verdict::of(class.shadow, d).decision;
            }
        }
    }

    /// Swaps in a new profile without losing any bucket state. The new limits apply from the
    /// next decision; each bucket's debt (what it owes until it is full again) carries over in
    /// **tokens**, never clamped: a full bucket stays full, and a caller who took `d` tokens
    /// more than have refilled still owes `d` tokens under the new limits, at the new bucket's
    /// emission interval (rounded up to a whole nanosecond, so a reload never grants). A caller
    /// who emptied a large bucket waits that debt out under a smaller or slower one
    /// (`Retry-After` says exactly how long), so no sequence of reloads hands out a token
    /// twice. This is bucket4j's `TokensInheritanceStrategy::AS_IS` applied to the tokens
    /// *owed* rather than the tokens available: available tokens would have to be cut to a
    /// smaller bucket (and a round trip then forgives the cut), and a full bucket would not
    /// stay full under a larger one, where a new identity starts full. Shard counts in the
    /// current window carry over unless the number of shards or the window changes.
    ///
    /// The bound, over any interval `[t0, t1]` and any reloads in it: each bucket admits at most
    /// `tokens_max + floor((t1 - t0) / t_min)` tokens, where `tokens_max` is the largest
    /// bucket and `t_min = min ceil(per / tokens)` the shortest emission interval among the
    /// profiles in force at some instant of `[t0, t1]`: no more than the most generous of
    /// them would have admitted alone. (Proof: the tokens owed, `(tat - now) / t` under the
    /// profile in force, grow by one per token admitted, never shrink at a reload, shrink by at
    /// most `(t1 - t0) / t_min` in between, and are at most `tokens_max` right after an
    /// admission.) A reload takes effect at the clock reading it takes just before publishing
    /// the profile, and debts are converted as of that instant; a decision whose clock reading
    /// and profile fall on either side of it (nanoseconds apart) is decided by the profile it
    /// read, at its reading, which the bound then counts among those in force. One
    /// exception: a debt that would be owed for more than 2^56 ns (2.28 years) under the new
    /// limits is capped there (a class taken from hundreds of tokens a second to one token a
    /// month); a later reload back to a fast class then owes only the capped amount.
    ///
    /// How: the state word records which of the last four profiles its TATs are counted in,
    /// and a decision under another profile converts them first (lazily, on its own CAS); a
    /// reload whose number would reuse the tag of a word still in the table converts that word
    /// first, in one pass over the table while admits go on (`IMPLEMENTATION.md`).
    ///
    /// Refused, with the old profile left in force: a profile that drops a route class (callers
    /// may hold its handle), changes `identities.capacity` (the table is allocated once: build a
    /// new limiter) or changes the anonymous prefixes (they are part of anonymous identities).
    pub fn reload(&self, profile: Profile) -> Result<(), ProfileError> {
        self.engine.reload_with(profile, None, |old, new| {
            // The new epoch's tag is that of the epoch three before `old`: words still counted
            // in that one are converted to `old`'s before the tag means the new epoch.
            if new.epoch >= EPOCHS as u64 {
                let reused = new.tag();
                self.table.retag(reused, old.tag(), |tats, class| {
                    old.convert(class, tats, reused)
                });
            }
            // Read last, just before the publish: debts are converted as of this instant.
            new.take_effect(self.now());
        })
    }

    /// The effective limits as a discovery document (serve it as JSON, e.g. at
    /// `/.well-known/rate-limits`): per route class its buckets and mode, the Retry-After cap,
    /// the catalog, and the capacity window. No tenant names and no usage figures.
    pub fn published_limits(&self) -> PublishedLimits {
        self.engine.published_limits()
    }

    /// Bytes held by the limiter: the identity table (64 bytes a slot), the tenants' table
    /// (64 bytes an entry) and their bookkeeping.
    pub fn memory_bytes(&self) -> usize {
        let cfg = self.engine.config.load();
        core::mem::size_of::<Self>() + self.table.memory_bytes() - core::mem::size_of::<Table>()
            + self.tenants.memory_bytes()
            - core::mem::size_of::<Tenants>()
            + core::mem::size_of_val(&*cfg.classes)
            + cfg.capacity.as_ref().map_or(0, |c| c.memory_bytes())
    }

    /// Identity slots in the table.
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Changes on every reload (for middleware caches of what they derive from the profile).
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.engine.config.generation()
    }

    /// The profile in force (a snapshot: a later reload does not change it).
    pub fn profile(&self) -> Arc<Profile> {
        self.engine.profile()
    }

    /// The caller's own tokens left in each bucket, charging nothing (for the `RateLimit`
    /// header, when the profile opts in to exposing it).
    pub fn remaining(&self, key: &Key<'_>) -> Remaining {
        loop {
            let cfg = self.engine.config.load();
            let limits = cfg.class(key.class).limits;
            let now = self.now();
            if let Ok(tats) = self.view(&cfg, key, now) {
                return Remaining {
                    burst: limits.burst.remaining(tats.burst, now),
                    sustained: limits.sustained.remaining(tats.sustained, now),
                };
            }
        }
    }

    /// Gives back the tokens a charge took when capacity (or a later item of `admit_all`) then
    /// refused (see `Limits::refund`), in the emission intervals of the epoch the word is
    /// counted in by then (the word converted to it first). An identity reclaimed meanwhile
    /// was full: there is nothing to give back.
    #[cold]
    fn refund(&self, cfg: &Config, r: &Receipt) {
        let limits = cfg.classes[r.class].limits;
        let cost = Cost {
            burst: r.tokens.saturating_mul(limits.burst.t),
            sustained: r.tokens.saturating_mul(limits.sustained.t),
        };
        let stale = self
            .table
            .update_existing_stamped(r.digest, cfg.tag(), |tats, tag| {
                match self.in_epoch(cfg, r.class, tats, tag) {
                    Ok(tats) => Apply::Write(cost.refund(tats), false),
                    Err(Stale) => Apply::Keep(true),
                }
            });
        if stale == Some(true) {
            self.refund(&self.engine.config.load(), r);
        }
    }

    /// Gives back everything one charge took: its tokens and its shared-capacity slots.
    #[cold]
    fn give_back(&self, cfg: &Config, r: Receipt) {
        self.refund(cfg, &r);
        if let (Some(cap), Some(taken)) = (&cfg.capacity, r.capacity) {
            cap.give_back(&self.tenants, r.tenant, taken, r.slots);
        }
    }

    /// Nanoseconds since the limiter was built, on its own monotonic clock (its last tick if
    /// the builder opted in to the coarse clock).
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        match &self.coarse {
            Some(coarse) => coarse.now(),
            None => nanos_since(&self.clock, self.epoch),
        }
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("profile", &self.engine.config.load().profile.name)
            .field("capacity", &self.table.capacity())
            .finish_non_exhaustive()
    }
}

/// Nanoseconds from `epoch` (a raw reading of `clock`) to now, stopped at [`MAX_NOW`].
#[inline]
fn nanos_since(clock: &quanta::Clock, epoch: u64) -> u64 {
    clock.delta_as_nanos(epoch, clock.raw()).min(MAX_NOW)
}
