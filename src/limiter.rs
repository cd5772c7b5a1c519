//! The embedded backend: the engine core over an in-process table of buckets and tenant
//! counts, on the limiter's own monotonic clock.

use core::fmt;
use std::sync::Arc;

use crate::capacity::Tenants;
use crate::config::Config;
use crate::decision::{Decision, Remaining};
use crate::engine::{Engine, Verdict};
use crate::identity::{Key, Resolved, RouteClass, Tenant};
use crate::profile::{Profile, ProfileError};
use crate::published::PublishedLimits;
use crate::table::{Table, EPOCHS, MAX_NOW};
use crate::wall_clock::WallClock;

mod all;
mod builder;
mod charge;
mod coarse_clock;
mod pinned;

pub use all::Refused;
pub use builder::{BuildError, Builder, KEY_SECRET_ENV};
use charge::Refusal;
pub use pinned::Pinned;

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

    /// A refusal the charge gave (or the news of a newer profile): concluded as `decide` does.
    #[cold]
    #[inline(never)]
    fn refused<'k>(
        &self,
        cfg: &Config,
        id: &Resolved<'_>,
        refusal: Refusal,
        now: u64,
        again: impl FnOnce() -> &'k Key<'k>,
    ) -> Verdict {
        match refusal {
            Refusal::Decided(refused) => {
                let shadow = cfg.class(id.class).shadow;
                self.engine
                    .conclude(cfg, shadow, id.class, id.tenant, refused, now)
            }
            Refusal::Stale => self.decide_again(again()),
        }
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
            Ok(receipt) => {
                if let Some(r) = receipt {
                    self.counted(cfg, key.class, &r.charged);
                }
                Decision::Admit
            }
            Err(Refusal::Decided(refused)) => refused,
            Err(Refusal::Stale) => {
                return self.decide_n(&self.engine.config.load(), key, n, self.now());
            }
        };
        let tenant = Tenant::of(key);
        self.engine
            .conclude(cfg, class.shadow, key.class, tenant, computed, now)
    }

    /// The decision against this limiter's table, charged if admitted, concluded by the engine.
    #[inline]
    fn decide(&self, cfg: &Config, key: &Key<'_>, now: u64) -> Verdict {
        let id = self.engine.hasher.resolve(key, cfg.capacity.is_some());
        let unit = cfg.class(key.class).limits.unit();
        match self.charge(cfg, &id, unit, 1, now) {
            // Admitted, in either mode: the common case, counted without a verdict's record.
            Ok(r) => {
                self.counted(cfg, key.class, &r);
                self.engine.admitted(cfg, key.class, &id.tenant, now);
                Verdict::ADMITTED
            }
            Err(refusal) => self.refused(cfg, &id, refusal, now, || key),
        }
    }

    /// [`Limiter::decide`] under the newest profile, on a fresh clock reading (one taken after
    /// the new profile took effect), when a reload came between the first try's config and
    /// its state word.
    #[cold]
    #[inline(never)]
    fn decide_again(&self, key: &Key<'_>) -> Verdict {
        self.decide(&self.engine.config.load(), key, self.now())
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
    /// Route class handles keep their numbers; a class the new profile adds is numbered after
    /// the others. The profile in force ([`Limiter::profile`]) lists its classes in that order,
    /// whatever order the new profile gives them, so that a class's position in it is its
    /// handle's number.
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

    /// Bytes held by the limiter: the identity table (64 bytes a slot), the tenants' slot
    /// counts (8 bytes a slot), the tenants' table (64 bytes an entry) and their bookkeeping.
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

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use core::mem::{size_of, size_of_val};

    use super::Limiter;
    use crate::capacity::Tenants;
    use crate::Profile;

    fn limiter() -> Limiter {
        let profile = Profile::from_yaml(
            "name: mem\nidentities: { capacity: 4096 }\nroute_classes:\n  \
             a: { burst: { tokens: 10, per: 1s }, sustained: { tokens: 100, per: 1h } }\n  \
             b: { burst: { tokens: 10, per: 1s }, sustained: { tokens: 100, per: 1h } }\n\
             shared_capacity: { shards: 8, window: 1s, slots_per_window: 100, tenant_share: 0.5 }\n",
        )
        .unwrap();
        Limiter::builder(profile).build().unwrap()
    }

    /// Each part the limiter holds is counted once: its own struct (which holds the tables'
    /// structs), 64 bytes an identity slot, the tenants' entries and slot counts, the route
    /// classes' configs, and a cache line a shard.
    #[test]
    fn memory_counts_every_part_once() {
        let l = limiter();
        let slots = l.capacity();
        let classes = size_of_val(&*l.engine.config.load().classes);
        assert!(classes > 0);
        let tenants = Tenants::bytes_for(slots, Tenants::entries_for(slots, 0));
        assert_eq!(
            l.memory_bytes(),
            size_of::<Limiter>() + 64 * slots + tenants + classes + 8 * 64
        );
    }

    /// The debug form names the profile and the table's size, and nothing of its callers.
    #[test]
    fn debug_names_the_profile_and_the_capacity() {
        let l = limiter();
        assert_eq!(
            format!("{l:?}"),
            format!(
                "Limiter {{ profile: \"mem\", capacity: {}, .. }}",
                l.capacity()
            )
        );
    }
}
