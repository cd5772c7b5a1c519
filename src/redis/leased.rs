//! The leased path of [`RedisLimiter`]: asking the store for a lease when the one in hand
//! (`lease.rs`) cannot decide, and giving unspent tokens back (on demand, from a task, and
//! by the sweep of expired leases).

use core::time::Duration;
use std::sync::Arc;
use std::time::Instant;

use super::lease::{self, Grant, Leases, Spend, Unspent};
use super::script::{Answer, Owner, Store};
use super::telemetry::{LeaseMetrics, Return};
use super::RedisLimiter;
use crate::config::Config;
use crate::decision::Decision;
use crate::engine::Verdict;
use crate::identity::{Digest, Key, Tenant};

impl RedisLimiter {
    /// Gives every leased token not yet spent back to the store and waits for it: how many
    /// went back (a refund the store does not answer within `store.timeout` leaves its tokens
    /// charged until the buckets refill). Call it before a worker stops; the limiter stays
    /// usable (later decisions take new leases). Dropping the limiter gives them back too, on
    /// the runtime it connected on, without waiting.
    pub async fn return_leases(&self) -> u64 {
        give_back(
            &self.store,
            self.leases.drain(),
            Return::Shutdown,
            &self.lease_metrics,
        )
        .await
    }

    /// Gives `back` to the store from a task of the limiter's runtime.
    pub(super) fn give_back_later(&self, back: Vec<Unspent>, why: Return) {
        if back.is_empty() {
            return;
        }
        let (store, metrics) = (self.store.clone(), self.lease_metrics.clone());
        self.runtime.spawn(async move {
            give_back(&store, back, why, &metrics).await;
        });
    }

    /// This worker's clock for leases: ns since the limiter connected.
    pub(super) fn local_now(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// A charging decision of cost `n` by the lease in hand, without holding the profile past
    /// this call: `Ok` when the lease decided it (no round trip), else what the store must be
    /// asked (`None`: the class has no leases).
    pub(super) fn spend_in_hand(
        &self,
        key: &Key<'_>,
        digest: Digest,
        n: u32,
        conclude: bool,
    ) -> Result<Verdict, Option<Spend>> {
        let cfg = self.engine.config.load();
        let class = cfg.class(key.class);
        if class.lease.is_none() {
            return Err(None);
        }
        let now = self.local_now();
        let asking = cfg.store_timeout.as_nanos() as u64;
        match self.leases.spend(digest, n, now, &cfg, asking) {
            Spend::Local => {
                self.lease_metrics.decision(true);
                if conclude {
                    self.engine.admitted(&cfg, key.class, &Tenant::of(key), now);
                }
                Ok(Verdict::of(class.shadow, Decision::Admit))
            }
            spend => Err(Some(spend)),
        }
    }

    /// A decision on a class with leases (see `lease.rs`) that the lease in hand could not
    /// make (`spend`, the caller's try, unless a reload came between): the store is asked for a
    /// new lease of at least `n` tokens (a refused larger lease is asked again for `n` alone,
    /// the request's exact decision). `most` and `ttl` are the class's.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn decide_leased(
        &self,
        cfg: &Arc<Config>,
        key: &Key<'_>,
        digests: (Digest, Digest),
        charge: bool,
        n: u32,
        (most, ttl): (u32, Duration),
        spend: Option<Spend>,
    ) -> (Decision, Option<Answer>) {
        let digest = digests.0;
        let sent = self.local_now();
        if !charge {
            if self.leases.holds(digest, sent, cfg) {
                return (Decision::Admit, None);
            }
            return self.ask_store(cfg, key, digests, false, n).await;
        }
        let asking = cfg.store_timeout.as_nanos() as u64;
        let spend = spend.unwrap_or_else(|| self.leases.spend(digest, n, sent, cfg, asking));
        let (size, asker) = match spend {
            Spend::Local => {
                self.lease_metrics.decision(true);
                return (Decision::Admit, None);
            }
            Spend::Store { size, back, asker } => {
                self.give_back_later(back.into_iter().collect(), Return::Expiry);
                (size, asker)
            }
        };
        self.lease_metrics.decision(false);
        // `most` is at most either bucket (the profile's check), so a lease of it fits one call.
        let want = size.max(n);
        let (mut decision, mut answer) = self.ask_store(cfg, key, digests, true, want).await;
        let mut took = want;
        if want > n && answer.is_some_and(|a| !a.decision.is_admit()) {
            // Until the wait for the larger lease has passed, leases are one token.
            let wait = decision.retry_after().unwrap_or(ttl);
            self.leases
                .refused(digest, sent.saturating_add(wait.as_nanos() as u64));
            (decision, answer) = self.ask_store(cfg, key, digests, true, n).await;
            took = n;
        }
        if let Some(a) = answer.filter(|a| a.decision.is_admit()) {
            self.lease_metrics.granted(took);
            let grant = Grant {
                owner: Owner::of(key),
                tenant: digests.1,
                took,
                spent: n,
                burst_left: a.burst_left,
                most,
                asker,
                expires: lease::expiry(sent, ttl, a.now, Store::window_end(cfg, a.now)),
                ttl: ttl.as_nanos() as u64,
                at: a.now,
            };
            let evicted = self.leases.granted(digest, grant, self.local_now(), cfg);
            self.give_back_later(evicted.into_iter().collect(), Return::Eviction);
        }
        (decision, answer)
    }
}

/// Gives `back` to the store, the refunds in flight together: the tokens that went back.
async fn give_back(
    store: &Arc<Store>,
    back: Vec<Unspent>,
    why: Return,
    metrics: &LeaseMetrics,
) -> u64 {
    let mut calls = tokio::task::JoinSet::new();
    for u in back {
        let store = store.clone();
        calls.spawn(async move {
            let ok = store
                .refund(&u.cfg, u.owner, (u.digest, u.tenant), u.n, u.at)
                .await;
            (u.n, ok)
        });
    }
    let mut returned = 0;
    while let Some(done) = calls.join_next().await {
        if let Ok((n, ok)) = done {
            metrics.returned(why, n, ok);
            returned += if ok { u64::from(n) } else { 0 };
        }
    }
    returned
}

/// Every 100ms, the rest of each expired lease goes back to the store, until the limiter is
/// dropped.
pub(super) async fn sweep(
    leases: std::sync::Weak<Leases>,
    store: Arc<Store>,
    metrics: LeaseMetrics,
    started: Instant,
) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(leases) = leases.upgrade() else {
            return;
        };
        let back = leases.expired(started.elapsed().as_nanos() as u64);
        drop(leases);
        give_back(&store, back, Return::Expiry, &metrics).await;
    }
}
