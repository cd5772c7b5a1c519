//! One charge against the table: both buckets in the one CAS (the word converted to the
//! decision's profile epoch first), then shared capacity; what it took, to give back exactly.

use super::Limiter;
use crate::bucket::{Cost, Short, Tats};
use crate::capacity::{Partition, Taken};
use crate::config::Config;
use crate::decision::{Cause, Decision};
use crate::identity::{Digest, Key, Resolved, RouteClass};
use crate::sync::unmodelled::{AtomicUsize, Ordering};
use crate::table::{Apply, Stamp, Tag};

/// What a charge took that its caller does not know already (it knows the identity, the
/// route class and the cost): small, so that the admitted path builds little.
#[derive(Clone, Copy, Debug)]
pub(super) struct Charged {
    /// The tenant's digest and the slots of shared capacity, where the profile has it.
    tenant: Digest,
    capacity: Option<Taken>,
    /// The admission left less than `observability.near_limit` of the burst: the caller
    /// counts it once the decision is final (a decision tried again after a reload is not).
    pub(super) near_limit: bool,
}

/// The tokens one charge took from an identity's buckets, as [`Limiter::refund`] gives them
/// back: `n` units of the route class, in the emission intervals of the epoch the state word
/// is in by then (a reload may have come between).
#[derive(Clone, Copy, Debug)]
pub(super) struct Tokens {
    digest: Digest,
    class: usize,
    n: u64,
}

/// What one charge took, to give it back exactly: its tokens, and what else it took (`n`
/// slots of shared capacity, where it took any).
#[derive(Clone, Copy, Debug)]
pub(super) struct Receipt {
    tokens: Tokens,
    pub(super) charged: Charged,
}

/// A charge's refusal, or the news that a newer profile was published since the config the
/// decision holds (the state word may be counted in it): decide again under the newest.
#[derive(Clone, Copy, Debug)]
pub(super) enum Refusal {
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
pub(super) struct Stale;

impl Limiter {
    /// [`Limiter::charge`] of `n` tokens and slots: `None` for `n = 0` (checked only, nothing
    /// charged), the refusal of a cost no bucket of the class can hold.
    pub(super) fn charge_n(
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
        let id = self.engine.hasher.resolve(key, cfg.capacity.is_some());
        let charged = self.charge(cfg, &id, cost, n.into(), now)?;
        Ok(Some(Receipt {
            tokens: Tokens {
                digest: id.digest,
                class: key.class.index() as usize,
                n: n.into(),
            },
            charged,
        }))
    }

    /// Charges `cost` to the caller's buckets and `slots` of shared capacity, all or nothing
    /// (a capacity refusal gives the tokens back); what was taken, or the refusal.
    #[inline]
    pub(super) fn charge(
        &self,
        cfg: &Config,
        id: &Resolved<'_>,
        cost: Cost,
        slots: u64,
        now: u64,
    ) -> Result<Charged, Refusal> {
        self.charge_hinted(cfg, id, None, cost, slots, now)
    }

    /// [`Limiter::charge`], trying the slot `hint` holds first and putting the identity's slot
    /// in it when it was elsewhere (a pinned identity's). Always inlined: the decision's hot
    /// path, whose arguments would otherwise go through memory.
    #[inline(always)]
    pub(super) fn charge_hinted(
        &self,
        cfg: &Config,
        id: &Resolved<'_>,
        hint: Option<&AtomicUsize>,
        cost: Cost,
        slots: u64,
        now: u64,
    ) -> Result<Charged, Refusal> {
        let class = id.class.index() as usize;
        let near_debt = cfg.classes[class].near_limit_debt;
        // The fast path: the identity in the slot it was last seen in (its home for a key),
        // charged there (`Table::cas_loop`, `Limiter::in_epoch`: a word of another epoch
        // converted, a newer profile reported), then shared capacity if the profile has it.
        // Not there (or its slot reclaimed meanwhile): the general path below, which looks
        // for it, or claims a slot, from the start.
        // Relaxed: a hint, checked against the slot's own word before it is used.
        let at = hint.map_or_else(
            || self.table.home_slot(id.digest),
            |h| h.load(Ordering::Relaxed),
        );
        let decide = self.decider(cfg, class, cost, now);
        if let Some(charged) = self.table.charge_at(at, id.digest, cfg.tag(), decide) {
            return match charged {
                Ok(burst) => self.charged(cfg, id, class, slots, now, burst - now > near_debt),
                Err(Some(short)) => Err(short.throttle().into()),
                Err(None) => Err(Refusal::Stale),
            };
        }
        self.charge_general(cfg, *id, hint, cost, slots, now)
    }

    /// What a charge does with the state word it read: counted in `cfg`'s epoch
    /// ([`Limiter::in_epoch`]; `Err(None)` if a newer profile was published), then both
    /// buckets charged `cost` (the burst's new TAT) or refused with their shortfall. A refusal
    /// writes nothing, after a reload too (a word of an older epoch is left as it is: its
    /// conversion does not depend on when it is made).
    #[inline(always)]
    fn decider<'a>(
        &'a self,
        cfg: &'a Config,
        class: usize,
        cost: Cost,
        now: u64,
    ) -> impl FnMut(Tats, Tag) -> Apply<Result<u64, Option<Short>>> + 'a {
        let limits = cfg.classes[class].limits;
        move |stored, tag| {
            let Ok(stored) = self.in_epoch(cfg, class, stored, tag) else {
                return Apply::Keep(Err(None));
            };
            match limits.charge(stored, now, cost) {
                Ok(next) => Apply::Write(next, Ok(next.burst)),
                Err(short) => Apply::Keep(Err(Some(short))),
            }
        }
    }

    /// The buckets are charged: shared capacity next, if the profile has it (a refusal gives
    /// the tokens back); what it took.
    #[inline(always)]
    fn charged(
        &self,
        cfg: &Config,
        id: &Resolved<'_>,
        class: usize,
        slots: u64,
        now: u64,
        near_limit: bool,
    ) -> Result<Charged, Refusal> {
        let Some(cap) = &cfg.capacity else {
            return Ok(Charged {
                tenant: Digest::NONE,
                capacity: None,
                near_limit,
            });
        };
        let tenant = id.tenant.digest(&self.engine.hasher);
        match cap.take(&self.tenants, tenant, id.tenant.authenticated(), now, slots) {
            Ok(taken) => Ok(Charged {
                tenant,
                capacity: Some(taken),
                near_limit,
            }),
            Err(refused) => {
                let tokens = Tokens {
                    digest: id.digest,
                    class,
                    n: slots,
                };
                self.refund(cfg, &tokens);
                Err(refused.into())
            }
        }
    }

    /// [`Limiter::charge_hinted`] the whole way: the slot found by a scan (or claimed), a word
    /// of another epoch converted, a reload under way published, shared capacity taken.
    #[inline(never)]
    fn charge_general(
        &self,
        cfg: &Config,
        id: Resolved<'_>,
        hint: Option<&AtomicUsize>,
        cost: Cost,
        slots: u64,
        now: u64,
    ) -> Result<Charged, Refusal> {
        let class = id.class.index() as usize;
        // Near the limit: the burst left after this admission is below the profile's share
        // (one comparison; see `config::near_limit_tokens`).
        let near = |burst: u64| burst - now > cfg.classes[class].near_limit_debt;
        let hasher = &self.engine.hasher;
        // Consulted only if the identity must claim a slot (the cold path).
        let partition = Partition {
            tenants: &self.tenants,
            caps: &cfg.identity_caps,
            tenant: || id.tenant.digest(hasher),
        };
        let stamp = Stamp {
            tag: cfg.tag(),
            class: Some(class),
        };
        let decide = self.decider(cfg, class, cost, now);
        let charged = self
            .table
            .update_stamped(id.digest, &partition, now, stamp, decide);
        // A pinned identity's slot was not where the pin said (the fast path found it
        // elsewhere or not at all): where it is now, for the next decision.
        if let Some(hint) = hint {
            self.rehint(id.digest, hint);
        }
        match charged {
            Ok(Ok(burst)) => self.charged(cfg, &id, class, slots, now, near(burst)),
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

    /// Puts where the identity `d` is now in `hint` (after a charge that found it elsewhere).
    #[cold]
    fn rehint(&self, d: Digest, hint: &AtomicUsize) {
        if let Some(i) = self.table.slot_of(d) {
            hint.store(i, Ordering::Relaxed);
        }
    }

    /// A state word's TATs counted in `cfg`'s epoch (converted from an older one if the word
    /// is tagged with it), or [`Stale`] if a profile newer than `cfg` was published: the word
    /// may be counted in that one. If `cfg` is newer than the published generation (read from
    /// the swap while a reload is between its two halves), publishes it first: the caller
    /// may write a word tagged with `cfg`'s epoch next (`ConfigCell::publish`). The hot path:
    /// one load of the generation (a line only a reload writes, just read by
    /// `ConfigCell::get`), two compares.
    #[inline]
    pub(super) fn in_epoch(
        &self,
        cfg: &Config,
        class: usize,
        tats: Tats,
        tag: Tag,
    ) -> Result<Tats, Stale> {
        let latest = self.engine.config.latest();
        if latest != cfg.epoch {
            if latest > cfg.epoch {
                return Err(Stale);
            }
            self.engine.config.publish(cfg.epoch);
        }
        if tag == cfg.tag() {
            Ok(tats)
        } else {
            Ok(cfg.convert(Some(class), tats, tag))
        }
    }

    /// The caller's TATs counted in `cfg`'s epoch, reading nothing but its slot (full at `now`
    /// if it has none).
    pub(super) fn view(&self, cfg: &Config, key: &Key<'_>, now: u64) -> Result<Tats, Stale> {
        let class = key.class.index() as usize;
        match self.table.peek_stamped(self.engine.hasher.digests(key).0) {
            None => Ok(Tats::full(now)),
            Some((tats, tag)) => self.in_epoch(cfg, class, tats, tag),
        }
    }

    /// What a charge of one token would answer at `now`, charging nothing (and claiming no
    /// slot: a caller with none has full buckets).
    pub(super) fn check(&self, cfg: &Config, key: &Key<'_>, now: u64) -> Result<Decision, Stale> {
        let limits = cfg.class(key.class).limits;
        let tats = self.view(cfg, key, now)?;
        Ok(match limits.charge(tats, now, limits.unit()) {
            Err(short) => short.throttle(),
            Ok(_) => match &cfg.capacity {
                None => Decision::Admit,
                Some(cap) => cap
                    .peek(
                        &self.tenants,
                        self.engine.hasher.digests(key).1,
                        key.tenant().is_some(),
                        now,
                    )
                    .err()
                    .unwrap_or(Decision::Admit),
            },
        })
    }

    /// Gives back the tokens a charge took when capacity (or a later item of `admit_all`) then
    /// refused (see `Limits::refund`), in the emission intervals of the epoch the word is
    /// counted in by then (the word converted to it first). An identity reclaimed meanwhile
    /// was full: there is nothing to give back.
    #[cold]
    pub(super) fn refund(&self, cfg: &Config, r: &Tokens) {
        let limits = cfg.classes[r.class].limits;
        let cost = Cost {
            burst: r.n.saturating_mul(limits.burst.t),
            sustained: r.n.saturating_mul(limits.sustained.t),
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

    /// Counts an admission that came near the limit (see [`Charged::near_limit`]), once the
    /// decision that made it is final.
    #[inline]
    pub(super) fn counted(&self, cfg: &Config, class: RouteClass, charged: &Charged) {
        if charged.near_limit {
            self.engine.near_limit(cfg, class);
        }
    }

    /// Gives back everything one charge took: its tokens and its shared-capacity slots.
    #[cold]
    pub(super) fn give_back(&self, cfg: &Config, r: Receipt) {
        self.refund(cfg, &r.tokens);
        if let (Some(cap), Some(taken)) = (&cfg.capacity, r.charged.capacity) {
            cap.give_back(&self.tenants, r.charged.tenant, taken, r.tokens.n);
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests;
