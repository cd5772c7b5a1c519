//! Leased tokens (a route class's `lease:`): a worker takes several of an identity's tokens from
//! the store in one call, as `admit_n(k)` charges them, and spends them here without a round
//! trip. Tokens are taken before they are spent, so the fleet never admits more than the store
//! charged; what a lease still holds when it expires, is evicted, or its profile is reloaded or
//! the limiter shut down goes back with the exact refund `admit_all` uses.
//!
//! # The size of a lease
//! An identity's first lease is one token (a plain decision). Each later one is eight times the
//! last, at most half of the tokens the burst bucket had left after the last charge and the
//! class's `max_tokens`: a busy identity far from its limit reaches full leases in three or
//! four store calls, and near its limit the burst's half caps leases to one token, so that
//! every decision is the store's again, with the store's exact `Retry-After`. A lease that
//! expires with tokens left makes the next one the size of what was spent of it (an identity
//! called now and then keeps small leases). When the store refuses a lease larger than the
//! request's cost, the request is asked again for its cost alone (its exact decision), and the
//! identity stays at one token until the wait the store gave for the larger lease has passed.
//! One caller of a worker asks for an identity's next lease at a time: callers that arrive
//! while it does ask the store for their own cost alone, so that a crowd arriving together
//! does not take a lease each.
//!
//! # What it costs the fleet
//! Tokens one worker holds while another is refused: with `w` workers, at most `(w - 1)` times
//! `max_tokens`, for at most `ttl` (and with shared capacity never past the window its slots were
//! counted in). A token is spent at most `ttl` after the store charged it, so the admissions of
//! any interval of length `d` are at most what the limits allow over `d + ttl`. A worker killed
//! with leases in hand gives nothing back: its tokens stay charged, as if spent, and return as the
//! buckets refill (the store keeps no record of leases; its keys' expiry returns nothing).

use core::time::Duration;
use std::sync::Arc;

use parking_lot::Mutex;

use super::script::{Owner, Store};
use crate::config::Config;
use crate::identity::{Digest, DigestMap};

/// Independent locks, so that workers' threads deciding for different identities rarely meet.
const SHARDS: usize = 64;

/// What one identity's lease holds, and how large the next one may be.
struct Lease {
    /// Tokens taken from the store and not yet spent.
    left: u32,
    /// Tokens the store charged for the lease in hand; after an expiry, those it spent.
    taken: u32,
    /// The next lease's size.
    size: u32,
    /// Until then (local ns) leases are one token: the store refused a larger one.
    hold_until: u64,
    /// Until then (local ns) another caller of this worker is asking the store for this
    /// identity's next lease: the others ask for their own cost only, so that callers arriving
    /// together do not each take a lease (the store's timeout bounds it, should that call be
    /// dropped).
    asking_until: u64,
    /// Past it (local ns) `left` is given back, not spent.
    expires: u64,
    /// How long its leases last (local ns), for forgetting an idle identity.
    ttl: u64,
    /// The server time (us) the tokens in hand were charged at: the window their slots count in.
    at: u64,
    owner: Owner,
    tenant: Digest,
    /// The profile the tokens were charged under: a reload gives them back.
    cfg: Arc<Config>,
}

impl Lease {
    /// Its rest is being given back: what was spent is what was taken, and the next lease is
    /// no larger than that.
    fn expire(&mut self) {
        self.taken -= self.left;
        self.left = 0;
        self.size = self.size.min(self.taken).max(1);
    }
}

/// Tokens to give back to the store (see [`Store::refund`]).
pub(super) struct Unspent {
    pub(super) digest: Digest,
    pub(super) tenant: Digest,
    pub(super) owner: Owner,
    pub(super) n: u32,
    pub(super) at: u64,
    pub(super) cfg: Arc<Config>,
}

impl Unspent {
    fn of(digest: Digest, l: &Lease) -> Unspent {
        Unspent {
            digest,
            tenant: l.tenant,
            owner: l.owner,
            n: l.left,
            at: l.at,
            cfg: l.cfg.clone(),
        }
    }
}

/// How a decision on a leased class goes.
pub(super) enum Spend {
    /// Spent from the lease in hand: admitted, no round trip.
    Local,
    /// Ask the store for a lease of `size` tokens (at least the request's cost); `back` is the
    /// rest of an expired lease, or of one taken under another profile, to give back.
    Store {
        size: u32,
        back: Option<Unspent>,
        /// Whether this caller asks for the identity's next lease (the others ask for their
        /// cost only, and record nothing).
        asker: bool,
    },
}

/// A lease the store granted, to record.
pub(super) struct Grant {
    pub(super) owner: Owner,
    pub(super) tenant: Digest,
    /// Tokens the store charged.
    pub(super) took: u32,
    /// Of them, the ones this request spent.
    pub(super) spent: u32,
    /// The burst's whole tokens left after the charge.
    pub(super) burst_left: u64,
    /// The class's `max_tokens`.
    pub(super) most: u32,
    /// Whether the caller asked for the identity's next lease (see [`Spend::Store`]).
    pub(super) asker: bool,
    /// When the lease expires (local ns).
    pub(super) expires: u64,
    pub(super) ttl: u64,
    pub(super) at: u64,
}

/// The leases this worker holds, by identity.
pub(super) struct Leases {
    shards: Box<[Mutex<DigestMap<Lease>>]>,
    /// Identities one shard keeps: past it one is evicted (and its tokens given back).
    per_shard: usize,
}

impl Leases {
    /// A table for about `identities` identities (the profile's `identities.capacity`).
    pub(super) fn new(identities: usize) -> Leases {
        Leases {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: identities.div_ceil(SHARDS).max(1),
        }
    }

    fn shard(&self, digest: Digest) -> &Mutex<DigestMap<Lease>> {
        &self.shards[(digest.hi as usize) % SHARDS]
    }

    /// Spends `n` tokens of `digest`'s lease if it holds them (under `cfg`, before its expiry);
    /// otherwise says how large a lease to ask the store for: one token while another caller
    /// of this worker is asking for the next lease (for at most `asking` ns).
    pub(super) fn spend(
        &self,
        digest: Digest,
        n: u32,
        now: u64,
        cfg: &Arc<Config>,
        asking: u64,
    ) -> Spend {
        let mut shard = self.shard(digest).lock();
        let Some(l) = shard.get_mut(&digest) else {
            return Spend::Store {
                size: 1,
                back: None,
                asker: true,
            };
        };
        let current = Arc::ptr_eq(&l.cfg, cfg);
        if current && now < l.expires && l.left >= n {
            l.left -= n;
            return Spend::Local;
        }
        let mut back = None;
        if l.left > 0 && (!current || now >= l.expires) {
            back = Some(Unspent::of(digest, l));
            l.expire();
        }
        if now < l.asking_until {
            return Spend::Store {
                size: 1,
                back,
                asker: false,
            };
        }
        l.asking_until = now.saturating_add(asking);
        let size = if now < l.hold_until { 1 } else { l.size };
        Spend::Store {
            size,
            back,
            asker: true,
        }
    }

    /// Whether `digest`'s lease holds a token to spend now (a peek's answer).
    pub(super) fn holds(&self, digest: Digest, now: u64, cfg: &Arc<Config>) -> bool {
        self.shard(digest)
            .lock()
            .get(&digest)
            .is_some_and(|l| Arc::ptr_eq(&l.cfg, cfg) && now < l.expires && l.left > 0)
    }

    /// Records what the store granted for `digest` under `cfg`: `took - spent` tokens to spend
    /// until `expires`, added to a lease in hand of the same profile and capacity window. Gives
    /// back what it replaces or evicts. `now` is local ns.
    pub(super) fn granted(
        &self,
        digest: Digest,
        g: Grant,
        now: u64,
        cfg: &Arc<Config>,
    ) -> Option<Unspent> {
        let cap = g
            .took
            .saturating_mul(8)
            .min(u32::try_from(g.burst_left / 2).unwrap_or(u32::MAX))
            .min(g.most);
        let mut shard = self.shard(digest).lock();
        let mut back = None;
        let size = cap.max(1);
        let mut hold_until = 0;
        if let Some(l) = shard.get_mut(&digest) {
            if !g.asker {
                // A plain decision while another caller asks for the lease: nothing to hold.
                debug_assert_eq!(g.took, g.spent);
                return None;
            }
            hold_until = l.hold_until;
            l.asking_until = 0;
            let live = l.left > 0 && now < l.expires && Arc::ptr_eq(&l.cfg, cfg);
            if live && Store::window_end(cfg, l.at) == Store::window_end(cfg, g.at) {
                // Two leases in hand (two decisions went to the store at once): spent as one,
                // until the earlier expiry.
                l.left += g.took - g.spent;
                l.taken += g.took;
                l.expires = l.expires.min(g.expires);
                return None;
            }
            if l.left > 0 {
                back = Some(Unspent::of(digest, l));
            }
        } else if shard.len() >= self.per_shard {
            back = evict(&mut shard);
        }
        shard.insert(
            digest,
            Lease {
                left: g.took - g.spent,
                taken: g.took,
                size,
                hold_until,
                asking_until: 0,
                expires: g.expires,
                ttl: g.ttl,
                at: g.at,
                owner: g.owner,
                tenant: g.tenant,
                cfg: cfg.clone(),
            },
        );
        back
    }

    /// The store refused a lease larger than the request: leases of `digest` are one token
    /// until `until` (local ns).
    pub(super) fn refused(&self, digest: Digest, until: u64) {
        if let Some(l) = self.shard(digest).lock().get_mut(&digest) {
            l.hold_until = until;
            l.asking_until = 0;
            l.size = 1;
        }
    }

    /// Takes the rest of every lease expired at `now` (to give back), and forgets identities
    /// idle for four of their ttls.
    pub(super) fn expired(&self, now: u64) -> Vec<Unspent> {
        let mut back = Vec::new();
        for shard in self.shards.iter() {
            shard.lock().retain(|digest, l| {
                if l.left > 0 && now >= l.expires {
                    back.push(Unspent::of(*digest, l));
                    l.expire();
                }
                l.left > 0 || now < l.expires.saturating_add(4 * l.ttl)
            });
        }
        back
    }

    /// Takes the rest of every lease (to give back) and forgets every identity.
    pub(super) fn drain(&self) -> Vec<Unspent> {
        let mut back = Vec::new();
        for shard in self.shards.iter() {
            for (digest, l) in shard.lock().drain() {
                if l.left > 0 {
                    back.push(Unspent::of(digest, &l));
                }
            }
        }
        back
    }
}

/// Makes room in a full shard: an identity holding nothing if there is one, else the lease
/// that expires first (its rest is given back).
fn evict(shard: &mut DigestMap<Lease>) -> Option<Unspent> {
    let victim = shard
        .iter()
        .min_by_key(|(_, l)| (l.left > 0, l.expires))
        .map(|(d, _)| *d)?;
    let l = shard.remove(&victim)?;
    (l.left > 0).then(|| Unspent::of(victim, &l))
}

/// When a lease taken with `sent` (local ns, before the call) at server time `at` expires: `ttl`
/// after `sent`, and with shared capacity no later than the window its slots were counted in
/// (whose end is `window_end` on the server's clock). `sent` is before the charge, so a token is
/// never spent later than `ttl` after it.
pub(super) fn expiry(sent: u64, ttl: Duration, at: u64, window_end: Option<u64>) -> u64 {
    let by_ttl = sent.saturating_add(ttl.as_nanos() as u64);
    match window_end {
        Some(end) => by_ttl.min(sent.saturating_add(end.saturating_sub(at) * 1_000)),
        None => by_ttl,
    }
}
