//! The Redis backend (`redis` feature): the same decisions as [`Limiter`], with
//! buckets and shard slots kept in Redis so that every worker of a service shares them.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tollgate::redis::RedisLimiter;
//! use tollgate::{Decision, Key, Profile};
//!
//! let profile = Profile::from_path("examples/profiles/example.yaml")?;
//! let limiter = RedisLimiter::connect("redis://127.0.0.1:6379/", profile).await?;
//! let write = limiter.route_class("write").unwrap();
//! let key = Key::authenticated("acme", "alice", write)?;
//! match limiter.admit(&key).await {
//!     Decision::Admit => { /* serve */ }
//!     Decision::Throttle { .. } => { /* 429 */ }
//!     Decision::Unavailable { .. } => { /* 503 */ }
//!     Decision::Exceeds { .. } => { /* 429: a weighted cost larger than a bucket */ }
//! }
//! # Ok(()) }
//! ```
//!
//! # Topologies
//! The URL chooses: `redis://host:port/db` one node; `redis+cluster://h1:p1,h2:p2/` a Redis
//! Cluster from seed nodes; `redis+sentinel://s1:p1,s2:p2/<master>[/db]` the primary the
//! Sentinels monitor under `<master>` (credentials, `user:pass@` before the hosts, are the data
//! nodes'). On a Cluster `MOVED` and `ASK` are followed and the code is loaded on every primary;
//! with Sentinels the primary is looked up again every 250ms and whenever a request sees it fail
//! or demoted. During a failover decisions fail closed; a new primary may lack the old one's last
//! writes unless [`RedisBuilder::replica_acks`] makes each decision wait for a replica.
//!
//! # One round trip, one script
//! Each decision is one `FCALL` of a Redis function (`admit.lua`, loaded with `FUNCTION LOAD`
//! under a name that carries its code's hash, and loaded again if the server lost it) or, on a
//! server without functions (before Redis 7), one `EVALSHA` of the same code (reloaded by the
//! client on `NOSCRIPT`). The code reads the server's clock (`TIME`, never the worker's),
//! charges both buckets of the identity (GCRA, as the embedded limiter) and, with shared
//! capacity, takes the tenant's share and the shard's slot, all or nothing: Redis runs it
//! atomically. An admit makes four calls inside Redis (`TIME`, `GET`, `SET`; `HMGET` and
//! `HSET` with capacity); `cargo bench --features redis --bench redis_cost` measures what that
//! costs the server.
//!
//! Where the server has tollgate's Redis module loaded (`redis-module/`: `tollgate.admit`,
//! found at connect, see [`RedisBuilder::redis_module`]), the decision is that module's native
//! command instead: the same decision on the same keys with the same replies, at about a fifth
//! of the function's server CPU. [`RedisLimiter::store_program`] says which decides.
//!
//! # Resolution and number ranges
//! Times are integer microseconds since the Unix epoch on the server's clock (the embedded
//! limiter uses nanoseconds): a bucket's emission interval is `t = ceil(per_us / tokens)` and its
//! size `tau = t * tokens`, so decisions and waits agree with the embedded model to the
//! microsecond (for periods that are whole microseconds per token; otherwise `t` rounds up to
//! the next microsecond, never granting more than `tokens / per`). Redis Lua numbers are doubles,
//! exact for integers below 2^53; every number the script handles is such an integer: now
//! (2^53 us is the year 2255), `t` and `tau` (at most 366 days + 2^32 us), a TAT (at most
//! now + a converted debt of at most 2^56 ns + the largest tau of the profiles that charged
//! it), a deadline, a window end, a count (at most 2^24). Windows of shared capacity are
//! aligned to the server's clock; if that clock steps back, counts carry on in the newer
//! window. A reload's debt carries over in tokens, converted lazily (see `admit.lua`).
//!
//! # Keys
//! `<prefix>:{<tag>}:i:<identity digest>` holds an identity's two TATs, the expiry last set, the
//! emission intervals the TATs are counted in and when it was last charged (six doubles, 48
//! bytes; the previous versions' 24 bytes and text `<burst>:<sustained>` are still read) and
//! `<prefix>:{<tag>}:c` a hash with the shard's window end, the shard's count and one count per
//! tenant digest. The tag is the tenant's shard (or, without shared capacity, 14 bits of the
//! tenant's digest), so one decision touches one Redis Cluster slot. Digests are keyed 128-bit
//! hashes in hex: no key or field holds a tenant or principal string. Every key expires: an
//! identity once its buckets are full again, plus [`RedisBuilder::expiry_margin`], plus at most an
//! eighth of the time it had left when its expiry was last set (so that a key charged again and
//! again rarely rewrites its expiry); a capacity hash when its window is over, plus the margin.
//! The previous version's capacity keys (`:t:` and `:s`, strings) are not read: after an upgrade
//! the shard counts of the window in progress start again from zero (at most one window's slots
//! more), and the old keys expire with that window. Changing `shared_capacity.shards` or a
//! tenant's `shard` moves keys to other tags: those
//! identities start with full buckets once.
//!
//! # The key secret
//! Workers agree on digests when they share the key secret and run the **same version of
//! tollgate** (the digests are aHash, stable only within one build). The secret is, first that
//! applies: [`RedisBuilder::key_secret`]; the `TOLLGATE_KEY_SECRET` environment variable; or the
//! value at `<prefix>:{secret}` in Redis, created once with `SET .. NX` by the first worker that
//! connects and read back by all others. A worker reads it once, at connect: after a `FLUSHALL`,
//! restart the workers (or set the secret explicitly).
//!
//! # One core with the embedded limiter
//! Configuration, reload rules, shadow mode, the discovery document
//! ([`RedisLimiter::published_limits`]) and metrics (feature `metrics`: the same series as
//! [`Limiter`], see [`crate::observe`]) come from the engine core the embedded limiter uses;
//! only where buckets and shard slots live differs. A peek is not counted; a deny-cache answer
//! and a fail-closed refusal are. The error budget's sub-windows run on the worker's clock.
//!
//! # Failing closed
//! An unreachable store, a reset connection, an error reply or no answer within the profile's
//! `store.timeout` gives [`Decision::Unavailable`] with [`Cause::StoreUnavailable`] and no wait
//! (503 `limiter_unavailable`, no Retry-After). The connection is re-established in the
//! background; no call waits longer than the timeout. A charging call carries its deadline on
//! the server's clock (from a conservative estimate of that clock's offset, learnt from the
//! times the script returns): a script that runs past it (queued behind a stalled server)
//! charges nothing and answers "expired", which the worker, having already answered 503,
//! ignores. The deadline is the timeout less a tenth, the allowance for the reply's way back.
//!
//! # One profile for the fleet
//! [`FleetProfile::publish`] validates a profile and publishes it as the next version of a name;
//! [`RedisLimiter::watch_profile`] keeps a limiter on the version published under it (see
//! [`FleetProfile::watch`]); [`RedisLimiter::profile_version`] and the discovery document tell
//! which version is in force.
//!
//! # State lost
//! After `FLUSHALL`, or a restart of a Redis without persistence, every identity starts with
//! full buckets and every shard with an empty window.

use core::fmt;
use core::time::Duration;
use std::sync::Arc;
use std::time::Instant;

use crate::decision::Decision;
use crate::engine::{Engine, Verdict};
use crate::identity::{Key, RouteClass, Tenant};
use crate::profile::{Profile, ProfileError};
use crate::published::PublishedLimits;
#[cfg(doc)]
use crate::{decision::Cause, Limiter};

mod builder;
mod clock;
mod connect_error;
mod connection;
mod deny;
mod fleet;
mod fleet_message;
mod fleet_signature;
mod fleet_watch;
mod lease;
mod leased;
mod program;
mod script;
mod sentinel;
mod telemetry;
mod topology;

pub use builder::{RedisBuilder, KEY_SECRET_ENV};
pub use connect_error::ConnectError;
pub use fleet::{FleetProfile, PublishError, ReadError};
pub use fleet_message::{decode as decode_fleet_message, FleetMessage, MessageError};
pub use fleet_signature::{FleetSigningKey, FleetVerifyingKey, KeyError, SignatureError, Signed};
pub use fleet_watch::{FleetTarget, FleetWatch, DEFAULT_POLL};

use crate::config::Config;
use deny::DenyCache;
use lease::Leases;
use script::{Answer, Owner, Store};
use telemetry::{LeaseMetrics, Return, StoreMetrics};

/// A limiter whose buckets and shard slots live in Redis, shared by every worker that connects
/// with the same profile. `Send + Sync`; clone nothing, share it by `&` or `Arc`.
pub struct RedisLimiter {
    /// Config, hasher, reload, shadow mode, metrics: what the embedded limiter shares.
    engine: Engine,
    /// Where this backend keeps bucket and capacity state (shared with the tasks that give
    /// leased tokens back).
    store: Arc<Store>,
    /// The leases this worker holds (route classes with `lease:`).
    leases: Arc<Leases>,
    lease_metrics: LeaseMetrics,
    /// Where leased tokens are given back from when no caller waits for it (a reload, drop).
    runtime: tokio::runtime::Handle,
    /// Throttles this worker answers without a round trip, if enabled.
    deny: Option<DenyCache>,
    /// Time zero of the error budget's windows (feature `metrics`), on this worker's clock.
    started: Instant,
    /// Round trips, store errors, deny-cache hits (feature `metrics`).
    metrics: StoreMetrics,
    /// Where fleet watchers subscribe (one node), see [`FleetProfile`].
    subscribe_url: Option<String>,
}

impl RedisLimiter {
    /// Connects with the defaults (see [`RedisBuilder`]): the key secret from
    /// `TOLLGATE_KEY_SECRET` or Redis, prefix `tollgate`, no deny cache.
    pub async fn connect(url: &str, profile: Profile) -> Result<RedisLimiter, ConnectError> {
        RedisLimiter::builder(url, profile).connect().await
    }

    /// Starts building a limiter on the Redis at `url`: `redis://host:port/db` (one node),
    /// `redis+cluster://host:port,host:port/` (a Redis Cluster) or
    /// `redis+sentinel://host:port,host:port/<master>[/db]` (see the module doc).
    pub fn builder(url: &str, profile: Profile) -> RedisBuilder {
        RedisBuilder {
            url: url.to_owned(),
            profile,
            secret: None,
            prefix: "tollgate".to_owned(),
            deny_cache: 0,
            connect_timeout: Duration::from_secs(1),
            margin: Duration::from_millis(100),
            observe: Default::default(),
            replica_acks: 0,
            redis_module: true,
        }
    }

    /// The handle of a route class, or `None` if the profile has no such class. Handles stay
    /// valid across reloads; workers with the same profile (and reloads) number them alike.
    pub fn route_class(&self, name: &str) -> Option<RouteClass> {
        self.engine.route_class(name)
    }

    /// The profile in force (a snapshot).
    pub fn profile(&self) -> Arc<Profile> {
        self.engine.profile()
    }

    /// The effective limits as a discovery document, the same as [`Limiter::published_limits`]
    /// gives for the same profile.
    pub fn published_limits(&self) -> PublishedLimits {
        self.engine.published_limits()
    }

    /// Decides one request and charges it if admitted, as [`Limiter::admit`] does, in one round
    /// trip (none when the deny cache already knows the caller is throttled).
    ///
    /// # Panics
    /// If `key`'s route class came from another limiter with more classes.
    pub async fn admit(&self, key: &Key<'_>) -> Decision {
        self.evaluate(key).await.decision
    }

    /// [`RedisLimiter::admit`], also telling what the profile computed when shadow mode let a
    /// refused request through.
    pub async fn evaluate(&self, key: &Key<'_>) -> Verdict {
        self.decide(key, true).await.0
    }

    /// Decides one request of weighted cost `n` and charges it if admitted, as
    /// [`Limiter::admit_n`] does (the same rules for `n = 0` and for a cost larger than a
    /// bucket, which is refused here without a round trip), in one round trip.
    pub async fn admit_n(&self, key: &Key<'_>, n: u32) -> Decision {
        self.evaluate_n(key, n).await.decision
    }

    /// [`RedisLimiter::admit_n`], also telling what the profile computed when shadow mode let a
    /// refused request through.
    pub async fn evaluate_n(&self, key: &Key<'_>, n: u32) -> Verdict {
        self.decide_n_traced(key, n, true).await.0
    }

    /// [`RedisLimiter::evaluate_n`] and the server time the script decided at (`None` when no
    /// round trip was made or the store did not answer): for tests that drive a reference
    /// model on the server's clock (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub async fn evaluate_n_traced(&self, key: &Key<'_>, n: u32) -> (Verdict, Option<u64>) {
        self.decide_n_traced(key, n, true).await
    }

    /// [`RedisLimiter::evaluate_n`] and the server time it decided at: what `admit_all`'s
    /// refunds need (it decides without leases: `leased` false).
    pub(crate) async fn decide_n_traced(
        &self,
        key: &Key<'_>,
        n: u32,
        leased: bool,
    ) -> (Verdict, Option<u64>) {
        let cfg = self.engine.config.load_full();
        if n > 0 {
            if let Err(bucket) = cfg.class(key.class).limits.cost(n) {
                let shadow = cfg.class(key.class).shadow;
                let computed = Decision::Exceeds { bucket };
                let elapsed = self.started.elapsed().as_nanos() as u64;
                return (
                    self.engine.conclude(
                        &cfg,
                        shadow,
                        key.class,
                        Tenant::of(key),
                        computed,
                        elapsed,
                    ),
                    None,
                );
            }
        }
        self.decide_n(key, n, leased).await
    }

    /// Admits every `(key, n)` in order, or none, as [`Limiter::admit_all`] does: at the first
    /// refusal, each item admitted before it is given back with one call of a refund script
    /// (exact for the buckets; its shard slots while their window lasts). One round trip per
    /// item decided, plus one per refund. Leases are not used: each item is the store's.
    pub async fn admit_all(&self, items: &[(Key<'_>, u32)]) -> Result<(), crate::Refused> {
        // (item, server time) of each charge made so far.
        let mut charged: Vec<(usize, u64)> = Vec::new();
        for (index, (key, n)) in items.iter().enumerate() {
            let (verdict, now) = self.decide_n_traced(key, *n, false).await;
            if !verdict.decision.is_admit() {
                let cfg = self.engine.config.load_full();
                for &(i, now) in &charged {
                    let (key, n) = &items[i];
                    let digests = self.engine.hasher.digests(key);
                    self.store
                        .refund(&cfg, Owner::of(key), digests, *n, now)
                        .await;
                }
                return Err(crate::Refused {
                    index,
                    decision: verdict.decision,
                });
            }
            // Charged only if the profile admitted it (not a shadowed refusal) and it cost.
            if let (Decision::Admit, Some(now), true) = (verdict.computed, now, *n > 0) {
                charged.push((index, now));
            }
        }
        Ok(())
    }

    /// What [`RedisLimiter::admit`] would answer now, charging nothing.
    pub async fn peek(&self, key: &Key<'_>) -> Decision {
        self.decide(key, false).await.0.decision
    }

    /// [`RedisLimiter::evaluate`] and the server time the script decided at (microseconds since
    /// the Unix epoch; `None` when the store did not answer or the deny cache did). For tests
    /// that drive a reference model on the server's clock (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub async fn evaluate_traced(&self, key: &Key<'_>) -> (Verdict, Option<u64>) {
        self.decide(key, true).await
    }

    /// Swaps in a new profile for this worker, as [`Limiter::reload`] does (the same refusals
    /// and the same rule: each bucket's debt carries over in tokens, none is forgiven). The
    /// state in Redis is converted lazily, by the next decision on each key, as of this
    /// reload's instant on the server's clock (as this worker estimates it; for each class the
    /// reload that last changed its emission intervals), or as of the key's last charge if
    /// that is later (a worker still on the old profile charged it); see
    /// the guide's Redis chapter (`tollgate::guide::redis`) for the rule and its bound in a fleet. Every worker must reload
    /// the same profile; until then each decides with its own. Clears the deny cache (the new
    /// limits may refill sooner).
    pub fn reload(&self, profile: Profile) -> Result<(), ProfileError> {
        let at = self.store.server_now();
        self.reload_at(profile, at)
    }

    /// [`RedisLimiter::reload`] taking effect at server time `at` (microseconds since the
    /// Unix epoch), for tests that compare with the embedded limiter at a known instant
    /// (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub fn reload_as_of(&self, profile: Profile, at: u64) -> Result<(), ProfileError> {
        self.reload_at(profile, at)
    }

    fn reload_at(&self, profile: Profile, at: u64) -> Result<(), ProfileError> {
        let _one = self.store.reloading();
        let old = self.engine.config.load_full();
        self.engine.reload(profile)?;
        self.store
            .reloaded(&old, &self.engine.config.load_full(), at);
        if let Some(deny) = &self.deny {
            deny.clear();
        }
        // Leases were charged under the old profile: their rest goes back (a decision that
        // finds one of them left gives it back too).
        self.give_back_later(self.leases.drain(), Return::Reload);
        Ok(())
    }

    /// What decides in Redis: `"module"` (tollgate's Redis module, `tollgate.admit`),
    /// `"function"` (the Redis function, `FCALL`) or `"script"` (`EVALSHA`, before Redis 7).
    /// Also the gauge `tollgate_store_program{program}` (feature `metrics`).
    pub fn store_program(&self) -> &'static str {
        self.store.program()
    }

    /// The command one charging decision for `key` sends (`FCALL ..` or `EVALSHA ..`), as
    /// words, for benchmarks that replay it with `redis-benchmark` (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub fn store_command(&self, key: &Key<'_>) -> Vec<String> {
        let cfg = self.engine.config.load_full();
        let (digest, tenant) = self.engine.hasher.digests(key);
        self.store.command(&cfg, key, digest, tenant)
    }

    /// The decision against the state in Redis (or the deny cache); a charging one is concluded
    /// by the engine (metrics, shadow mode), a peek only gets the shadow rule.
    async fn decide(&self, key: &Key<'_>, charge: bool) -> (Verdict, Option<u64>) {
        self.decide_cost(key, charge, 1, charge, true).await
    }

    /// [`RedisLimiter::decide`] for a cost of `n` (0: checked as for one token, charged
    /// nothing, and concluded like a charge). The caller refused a cost larger than a bucket.
    async fn decide_n(&self, key: &Key<'_>, n: u32, leased: bool) -> (Verdict, Option<u64>) {
        self.decide_cost(key, n > 0, n.max(1), true, leased).await
    }

    async fn decide_cost(
        &self,
        key: &Key<'_>,
        charge: bool,
        n: u32,
        conclude: bool,
        leased: bool,
    ) -> (Verdict, Option<u64>) {
        let digests = self.engine.hasher.digests(key);
        let spend = if leased && charge {
            match self.spend_in_hand(key, digests.0, n, conclude) {
                Ok(verdict) => return (verdict, None),
                Err(spend) => spend,
            }
        } else {
            None
        };
        let cfg = self.engine.config.load_full();
        let class = cfg.class(key.class);
        let shadow = class.shadow;
        let (computed, answer) = match (class.lease.filter(|_| leased), spend) {
            (Some(policy), spend) => {
                self.decide_leased(&cfg, key, digests, charge, n, policy, spend)
                    .await
            }
            (None, _) => self.ask_store(&cfg, key, digests, charge, n).await,
        };
        let (now, near) = (answer.map(|a| a.now), answer.is_some_and(|a| a.near));
        let verdict = if conclude {
            let elapsed = self.started.elapsed().as_nanos() as u64;
            if near {
                self.engine.near_limit(&cfg, key.class);
            }
            let tenant = Tenant::of(key);
            self.engine
                .conclude(&cfg, shadow, key.class, tenant, computed, elapsed)
        } else {
            Verdict::of(shadow, computed)
        };
        (verdict, now)
    }

    /// One decision of cost `n` by the store (charged if `charge`), or by the deny cache when
    /// it knows one token does not fit: neither does more, but a wait for more is longer than
    /// the one cached, so a larger cost asks the store for its exact wait (and its throttle,
    /// about `n` tokens, is not one to cache). The store's answer, if it gave one.
    async fn ask_store(
        &self,
        cfg: &Config,
        key: &Key<'_>,
        digests: (crate::identity::Digest, crate::identity::Digest),
        charge: bool,
        n: u32,
    ) -> (Decision, Option<Answer>) {
        let deny = self.deny.as_ref().filter(|_| n == 1);
        if let Some(cached) = deny.and_then(|d| d.get(digests.0)) {
            self.metrics.deny_hit();
            return (cached, None);
        }
        let sent = Instant::now();
        let result = self.store.call(cfg, key, digests, charge, n).await;
        self.metrics.call(result.err(), sent.elapsed());
        let Ok(answer) = result else {
            return (script::STORE_UNAVAILABLE, None);
        };
        if let (
            Some(deny),
            Decision::Throttle {
                retry_after,
                bucket,
            },
        ) = (deny, answer.decision)
        {
            deny.insert(digests.0, retry_after, bucket);
        }
        (answer.decision, Some(answer))
    }
}

impl Drop for RedisLimiter {
    fn drop(&mut self) {
        self.give_back_later(self.leases.drain(), Return::Shutdown);
    }
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("profile", &self.engine.config.load().profile.name)
            .field("prefix", &self.store.prefix)
            .field("deny_cache", &self.deny.is_some())
            .finish_non_exhaustive()
    }
}

impl crate::Admission for RedisLimiter {
    fn route_class(&self, name: &str) -> Option<RouteClass> {
        RedisLimiter::route_class(self, name)
    }

    fn profile(&self) -> Arc<Profile> {
        RedisLimiter::profile(self)
    }

    fn admit(&self, key: &Key<'_>) -> impl core::future::Future<Output = Decision> + Send {
        RedisLimiter::admit(self, key)
    }

    fn evaluate(&self, key: &Key<'_>) -> impl core::future::Future<Output = Verdict> + Send {
        RedisLimiter::evaluate(self, key)
    }

    fn admit_n(
        &self,
        key: &Key<'_>,
        n: u32,
    ) -> impl core::future::Future<Output = Decision> + Send {
        RedisLimiter::admit_n(self, key, n)
    }

    fn admit_all(
        &self,
        items: &[(Key<'_>, u32)],
    ) -> impl core::future::Future<Output = Result<(), crate::Refused>> + Send {
        RedisLimiter::admit_all(self, items)
    }
}
