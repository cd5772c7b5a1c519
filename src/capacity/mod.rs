//! Shared capacity: each shard has `slots_per_window` admission slots per fixed window, and no
//! tenant holds more than its cap of its shard's slots in one window.
//!
//! Windows are **fixed** (aligned to the limiter's clock), not sliding: a fixed window is one
//! word per shard and per tenant, exact under concurrency, and its end is the same instant for
//! every caller, so a 503's Retry-After (time to the next window) says nothing about anyone's
//! usage. The cost is the known edge effect: up to twice the slots can pass in one window's
//! length straddling a boundary. The per-identity buckets, which are exact at every instant,
//! bound each caller; the shard ceiling bounds the sum per window.
//!
//! Order: the tenant's share first (a tenant over its share never touches the shard's count,
//! so it cannot crowd out its neighbours even for an instant), then the shard. Either refusal
//! leaves nothing taken.
//!
//! A weighted request of cost `n` takes `n` slots of both, all or none. A cost larger than
//! the tenant's cap or the shard's slots can never be had in any window: it is refused with
//! no `Retry-After` (the next window would refuse it too), which also says nothing of how
//! full anything is.

use core::time::Duration;
use std::sync::Arc;

use crate::decision::{Cause, Decision};
use crate::identity::{Digest, DigestMap};

mod counters;
mod slot_counts;
mod tenants;

pub use counters::ShardCounter;
pub(crate) use tenants::{IdentityCaps, Partition, Tenants};

/// Shared capacity as the hot path sees it, built from the profile by `config`.
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

/// Where a request's slots were counted, so that they can be given back exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Taken {
    /// The end of the tenant's window they were counted in.
    tenant_end: u64,
    shard: usize,
    /// The shard counter's window id they were counted in.
    window: u64,
}

/// A request's place in shared capacity.
struct Place {
    shard: usize,
    /// The tenant's cap in its shard per window.
    limit: u64,
    window: u64,
    /// The window's end, on the limiter's clock.
    end: u64,
}

impl Place {
    /// The wait from `now` until the next window: the Retry-After of every capacity refusal
    /// (computed only for one: the division into seconds is not on the admit path).
    #[cold]
    fn next_window(&self, now: u64) -> Option<Duration> {
        Some(Duration::from_nanos(self.end - now))
    }
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

    /// The tenant's shard (pinned, or a keyed hash of the tenant) and its cap per window. The
    /// Redis backend places requests with this too.
    #[inline]
    pub(crate) fn shard_and_cap(&self, tenant: Digest, authenticated: bool) -> (usize, u64) {
        let listed = match authenticated {
            true if !self.listed.is_empty() => self.listed.get(&tenant).copied(),
            _ => None,
        };
        let (pinned, limit) = listed.unwrap_or((None, self.default_cap));
        // A keyed hash of the tenant (its digest's high half, range-reduced) unless pinned.
        let shard = pinned
            .unwrap_or_else(|| ((u128::from(tenant.hi) * u128::from(self.shards)) >> 64) as u32);
        (shard as usize, limit)
    }

    /// The window's length in microseconds (the Redis backend's unit) and a shard's slots in it.
    #[cfg(feature = "redis")]
    pub(crate) fn window_micros(&self) -> (u64, u64) {
        (self.window_ns.div_ceil(1_000), self.slots_per_window)
    }

    #[inline]
    fn place(&self, tenant: Digest, authenticated: bool, now: u64) -> Place {
        let (shard, limit) = self.shard_and_cap(tenant, authenticated);
        let window = now / self.window_ns;
        let end = (window + 1) * self.window_ns;
        Place {
            shard,
            limit,
            window,
            end,
        }
    }

    /// Takes `n` tenant slots and `n` shard slots for a request at `now`, or none.
    #[inline]
    pub(crate) fn take(
        &self,
        tenants: &Tenants,
        tenant: Digest,
        authenticated: bool,
        now: u64,
        n: u64,
    ) -> Result<Taken, Decision> {
        let place = self.place(tenant, authenticated, now);
        let Place {
            shard,
            limit,
            window,
            end,
        } = place;
        let counted = tenants
            .take(tenant, now, (end, self.window_ns), limit, n)
            .map_err(|cause| Decision::Unavailable {
                // Which slot frees when depends on other callers: no wait for a full table;
                // a cost above the cap never fits: no wait either.
                retry_after: if cause == Cause::TableFull || n > limit {
                    None
                } else {
                    place.next_window(now)
                },
                cause,
            })?;
        match self
            .counters
            .get(shard)
            .and_then(|c| c.take_n(window, self.slots_per_window, n))
        {
            Some(window) => Ok(Taken {
                tenant_end: counted,
                shard,
                window,
            }),
            None => {
                tenants.give_back(tenant, counted, n);
                Err(Decision::Unavailable {
                    retry_after: if n > self.slots_per_window {
                        None
                    } else {
                        place.next_window(now)
                    },
                    cause: Cause::ShardFull,
                })
            }
        }
    }

    /// Gives back the `n` slots of both kinds that [`CapacityConfig::take`] took (see
    /// `Tenants::give_back` and `ShardCounter::give_back` for windows that have moved on).
    #[cold]
    pub(crate) fn give_back(&self, tenants: &Tenants, tenant: Digest, taken: Taken, n: u64) {
        tenants.give_back(tenant, taken.tenant_end, n);
        if let Some(c) = self.counters.get(taken.shard) {
            c.give_back(taken.window, n);
        }
    }

    /// [`CapacityConfig::take`] without taking: the refusal it would give, if any.
    pub(crate) fn peek(
        &self,
        tenants: &Tenants,
        tenant: Digest,
        authenticated: bool,
        now: u64,
    ) -> Result<(), Decision> {
        let place = self.place(tenant, authenticated, now);
        let retry_after = place.next_window(now);
        let Place {
            shard,
            limit,
            window,
            end,
        } = place;
        if tenants.used(tenant, end, self.window_ns) >= limit {
            return Err(Decision::Unavailable {
                retry_after,
                cause: Cause::TenantShare,
            });
        }
        match self.counters.get(shard) {
            Some(c) if c.used(window) < self.slots_per_window => Ok(()),
            _ => Err(Decision::Unavailable {
                retry_after,
                cause: Cause::ShardFull,
            }),
        }
    }

    /// Bytes held by the shard counters.
    pub(crate) fn memory_bytes(&self) -> usize {
        core::mem::size_of_val(&*self.counters)
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

    /// `shards` shards of `slots` per window of `window_ns`, every tenant capped at half.
    fn config(shards: u32, window_ns: u64, slots: u64) -> CapacityConfig {
        CapacityConfig {
            shards,
            window_ns,
            slots_per_window: slots,
            default_cap: slots / 2,
            listed: DigestMap::default(),
            counters: (0..shards).map(|_| ShardCounter::new()).collect(),
        }
    }

    #[test]
    fn memory_is_one_cache_line_a_shard() {
        assert_eq!(config(3, 1_000_000_000, 10).memory_bytes(), 3 * 64);
        assert_eq!(config(1, 1_000_000_000, 10).memory_bytes(), 64);
    }

    /// The Redis backend's window in microseconds never ends before the engine's.
    #[cfg(feature = "redis")]
    #[test]
    fn the_redis_window_is_rounded_up_to_whole_microseconds() {
        assert_eq!(
            config(1, 1_000_000_000, 40).window_micros(),
            (1_000_000, 40)
        );
        assert_eq!(config(1, 1_500, 7).window_micros(), (2, 7));
    }
}
