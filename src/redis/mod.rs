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
//! }
//! # Ok(()) }
//! ```
//!
//! # One round trip, one script
//! Each decision is one `EVALSHA` of one Lua script (`admit.lua`, reloaded by the client on
//! `NOSCRIPT`). The script reads the server's clock (`TIME`, never the worker's), charges both
//! buckets of the identity (GCRA, as the embedded limiter) and, with shared capacity, takes the
//! tenant's share and the shard's slot, all or nothing: Redis runs a script atomically.
//!
//! # Resolution and number ranges
//! Times are integer microseconds since the Unix epoch on the server's clock (the embedded
//! limiter uses nanoseconds): a bucket's emission interval is `t = ceil(per_us / tokens)` and its
//! size `tau = t * tokens`, so decisions and waits agree with the embedded model to the
//! microsecond (for periods that are whole microseconds per token; otherwise `t` rounds up to
//! the next microsecond, never granting more than `tokens / per`). Redis Lua numbers are doubles,
//! exact for integers below 2^53; every number the script handles is such an integer: now
//! (2^53 us is the year 2255), `t` and `tau` (at most 366 days + 2^32 us), a TAT (at most
//! now + tau), a window end, a count (at most 2^24). Windows of shared capacity are aligned to
//! the server's clock; if that clock steps back, counts carry on in the newer window.
//!
//! # Keys
//! `<prefix>:{<tag>}:i:<identity digest>` holds an identity's two TATs, `<prefix>:{<tag>}:t:<tenant
//! digest>` a tenant's count in its shard's window and `<prefix>:{<tag>}:s` the shard's count.
//! The tag is the tenant's shard (or, without shared capacity, 14 bits of the tenant's digest), so
//! one decision touches one Redis Cluster slot. Digests are keyed 128-bit hashes in hex: no key
//! holds a tenant or principal string. Every key expires (`PX`) once its bucket is full again or
//! its window is over, plus [`RedisBuilder::expiry_margin`]. Changing `shared_capacity.shards` or a
//! tenant's `shard` moves keys to other tags: those identities start with full buckets once.
//!
//! # The key secret
//! Workers agree on digests when they share the key secret and run the **same version of
//! tollgate** (the digests are aHash, stable only within one build). The secret is, first that
//! applies: [`RedisBuilder::key_secret`]; the `TOLLGATE_KEY_SECRET` environment variable; or the
//! value at `<prefix>:{secret}` in Redis, created once with `SET .. NX` by the first worker that
//! connects and read back by all others. A worker reads it once, at connect: after a `FLUSHALL`,
//! restart the workers (or set the secret explicitly).
//!
//! # Failing closed
//! An unreachable store, a reset connection, an error reply or no answer within the profile's
//! `store.timeout` gives [`Decision::Unavailable`] with [`Cause::StoreUnavailable`] and no wait
//! (503 `limiter_unavailable`, no Retry-After). The connection is re-established in the
//! background; no call waits longer than the timeout.

use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use std::time::Instant;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::Script;

use crate::config::Config;
use crate::decision::{Cause, Decision, Outcome};
use crate::engine::{random_secret, Engine, ObserveOptions, Verdict};
use crate::identity::{Digest, Key, RouteClass};
use crate::profile::{Profile, ProfileError};
use crate::published::{PublishedBucket, PublishedLimits};
#[cfg(doc)]
use crate::Limiter;

mod deny;

use deny::DenyCache;

/// The decision script; see its header for the arguments and the number ranges.
const SCRIPT: &str = include_str!("admit.lua");

/// The environment variable that sets the key secret (unless the builder does).
pub const KEY_SECRET_ENV: &str = "TOLLGATE_KEY_SECRET";

/// A limiter whose buckets and shard slots live in Redis, shared by every worker that connects
/// with the same profile. `Send + Sync`; clone nothing, share it by `&` or `Arc`.
pub struct RedisLimiter {
    /// Config, hasher, reload, shadow mode, metrics: what the embedded limiter shares.
    engine: Engine,
    /// Where this backend keeps bucket and capacity state.
    conn: ConnectionManager,
    script: Script,
    prefix: Box<str>,
    margin_ms: u64,
    deny: Option<DenyCache>,
    /// Time zero of the error budget's windows (feature `metrics`), on this worker's clock.
    started: Instant,
}

/// A bucket as the script takes it: emission interval `t` and tolerance `tau`, in microseconds
/// (`t = ceil(per_us / tokens)`, never granting more than `tokens / per`).
fn micros(b: &PublishedBucket) -> [u64; 2] {
    let t = b.per.as_nanos().div_ceil(1_000).div_ceil(b.tokens);
    [t, t * b.tokens]
}

/// Builds a [`RedisLimiter`]: `RedisLimiter::builder(url, profile).key_secret(s).connect().await`.
pub struct RedisBuilder {
    url: String,
    profile: Profile,
    secret: Option<Vec<u8>>,
    prefix: String,
    deny_cache: usize,
    connect_timeout: Duration,
    margin: Duration,
    observe: ObserveOptions,
}

/// Why [`RedisLimiter::connect`] failed.
#[derive(Debug)]
pub enum ConnectError {
    /// The URL could not be parsed, the server refused, or a command failed.
    Store(::redis::RedisError),
    /// The server did not answer within the connect timeout.
    Timeout(Duration),
    /// The key secret (from the builder or `TOLLGATE_KEY_SECRET`) is empty.
    EmptySecret,
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Store(e) => write!(f, "redis: {e}"),
            ConnectError::Timeout(d) => write!(f, "redis did not answer within {d:?}"),
            ConnectError::EmptySecret => f.write_str("key secret must not be empty"),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<::redis::RedisError> for ConnectError {
    fn from(e: ::redis::RedisError) -> Self {
        ConnectError::Store(e)
    }
}

impl RedisBuilder {
    /// The key secret (default: `TOLLGATE_KEY_SECRET`, else the one kept in Redis). Every worker
    /// sharing the store must use the same secret and the same tollgate version.
    pub fn key_secret(mut self, secret: &[u8]) -> Self {
        self.secret = Some(secret.to_vec());
        self
    }

    /// The first part of every key (default `tollgate`), to keep several services, or several
    /// profiles, apart on one server.
    pub fn key_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_owned();
        self
    }

    /// Answers a throttled identity locally until its `retry_after` has passed, remembering at
    /// most `capacity` identities (default 0: off). Exact, and it saves the round trips of a
    /// retry storm; capacity refusals are never cached.
    pub fn deny_cache(mut self, capacity: usize) -> Self {
        self.deny_cache = capacity;
        self
    }

    /// The longest [`RedisBuilder::connect`] waits for the server (default 1s). Later calls
    /// wait at most the profile's `store.timeout`.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a key outlives the instant it stops mattering (default 100ms): a small margin
    /// against the rounding of `PX` to milliseconds.
    pub fn expiry_margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// Counts decisions per listed tenant too, as [`crate::Builder::per_tenant_metrics`] does.
    #[cfg(feature = "metrics")]
    pub fn per_tenant_metrics(mut self, on: bool) -> Self {
        self.observe.per_tenant = on;
        self
    }

    /// Called when the share of capacity refusals crosses `error_budget.capacity_rejections`,
    /// as [`crate::Builder::on_error_budget`] is.
    #[cfg(feature = "metrics")]
    pub fn on_error_budget(
        mut self,
        callback: impl Fn(&crate::observe::BudgetAlert) + Send + Sync + 'static,
    ) -> Self {
        self.observe.callback = Some(Arc::new(callback));
        self
    }

    /// Connects, settles the key secret and loads the script. Fails if the server cannot be
    /// reached within the connect timeout; once connected, outages only fail decisions closed.
    pub async fn connect(self) -> Result<RedisLimiter, ConnectError> {
        let limit = self.connect_timeout;
        match tokio::time::timeout(limit, self.connect_inner()).await {
            Ok(r) => r,
            Err(_) => Err(ConnectError::Timeout(limit)),
        }
    }

    async fn connect_inner(self) -> Result<RedisLimiter, ConnectError> {
        let client = ::redis::Client::open(self.url.as_str())?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            // Callers time out themselves (`store.timeout`); a slow answer still arrives.
            .set_response_timeout(None)
            // Reconnect soon after an outage ends: decisions resume within ~200ms of it.
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200))
            .set_number_of_retries(4);
        let mut conn = client.get_connection_manager_with_config(config).await?;
        let secret = match self.secret {
            Some(s) => s,
            None => match std::env::var(KEY_SECRET_ENV) {
                Ok(s) => s.into_bytes(),
                Err(_) => stored_secret(&mut conn, &self.prefix).await?,
            },
        };
        if secret.is_empty() {
            return Err(ConnectError::EmptySecret);
        }
        let script = Script::new(SCRIPT);
        script.prepare_invoke().load_async(&mut conn).await?;
        Ok(RedisLimiter {
            engine: Engine::new(self.profile, &secret, self.observe),
            conn,
            script,
            prefix: self.prefix.into(),
            margin_ms: self.margin.as_millis() as u64,
            deny: (self.deny_cache > 0).then(|| DenyCache::new(self.deny_cache)),
            started: Instant::now(),
        })
    }
}

/// The secret kept in Redis: created once by the first worker (`SET NX`), then read by all.
async fn stored_secret(
    conn: &mut ConnectionManager,
    prefix: &str,
) -> Result<Vec<u8>, ConnectError> {
    let key = format!("{prefix}:{{secret}}");
    let fresh: String = random_secret().iter().map(|b| format!("{b:02x}")).collect();
    let (secret,): (String,) = ::redis::pipe()
        .cmd("SET")
        .arg(&key)
        .arg(&fresh)
        .arg("NX")
        .ignore()
        .cmd("GET")
        .arg(&key)
        .query_async(conn)
        .await?;
    Ok(secret.into_bytes())
}

/// What the script replied: ([`Outcome::index`], wait in us, server time in us since the Unix
/// epoch).
type ScriptReply = (u8, u64, u64);

impl RedisLimiter {
    /// Connects with the defaults (see [`RedisBuilder`]): the key secret from
    /// `TOLLGATE_KEY_SECRET` or Redis, prefix `tollgate`, no deny cache.
    pub async fn connect(url: &str, profile: Profile) -> Result<RedisLimiter, ConnectError> {
        RedisLimiter::builder(url, profile).connect().await
    }

    /// Starts building a limiter on the Redis at `url` (`redis://host:port/db`).
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

    /// What [`RedisLimiter::admit`] would answer now, charging nothing.
    pub async fn peek(&self, key: &Key<'_>) -> Decision {
        self.decide(key, false).await.0.decision
    }

    /// [`RedisLimiter::evaluate`] and the server time the script decided at (microseconds since
    /// the Unix epoch; `None` when the store did not answer or the deny cache did). For tests
    /// that drive a reference model on the server's clock.
    #[doc(hidden)]
    pub async fn evaluate_traced(&self, key: &Key<'_>) -> (Verdict, Option<u64>) {
        self.decide(key, true).await
    }

    /// Swaps in a new profile for this worker, as [`Limiter::reload`] does (the same refusals).
    /// The state in Redis stays: each bucket's TATs are clamped to the new sizes as they are
    /// used. Every worker must reload the same profile; until then each decides with its own.
    /// Clears the deny cache (the new limits may refill sooner).
    pub fn reload(&self, profile: Profile) -> Result<(), ProfileError> {
        self.engine.reload(profile)?;
        if let Some(deny) = &self.deny {
            deny.clear();
        }
        Ok(())
    }

    /// The decision against the state in Redis (or the deny cache); a charging one is concluded
    /// by the engine (metrics, shadow mode), a peek only gets the shadow rule.
    async fn decide(&self, key: &Key<'_>, charge: bool) -> (Verdict, Option<u64>) {
        let cfg = self.engine.config.load_full();
        let shadow = cfg.class(key.class).shadow;
        let (digest, tenant) = self.engine.hasher.digests(key);
        let (computed, now) = match self.deny.as_ref().and_then(|d| d.get(digest)) {
            Some(cached) => (cached, None),
            None => match self.call(&cfg, key, digest, tenant, charge).await {
                Some((outcome, wait, now)) => (script_decision(outcome, wait), Some(now)),
                None => (STORE_UNAVAILABLE, None),
            },
        };
        if let (
            Some(deny),
            Decision::Throttle {
                retry_after,
                bucket,
            },
        ) = (&self.deny, computed)
        {
            deny.insert(digest, retry_after, bucket);
        }
        let verdict = if charge {
            let elapsed = self.started.elapsed().as_nanos() as u64;
            self.engine.conclude(&cfg, shadow, key, computed, elapsed)
        } else {
            Verdict::of(shadow, computed)
        };
        (verdict, now)
    }

    /// One `EVALSHA`, bounded by the profile's `store.timeout`; `None` on any failure.
    async fn call(
        &self,
        cfg: &Config,
        key: &Key<'_>,
        digest: Digest,
        tenant: Digest,
        charge: bool,
    ) -> Option<ScriptReply> {
        let class = &cfg.published.route_classes[key.class.0 as usize];
        let ([bt, btau], [st, stau]) = (micros(&class.burst), micros(&class.sustained));
        let mut inv = self.script.prepare_invoke();
        let capacity = cfg.capacity.as_ref();
        let (shard, cap) = match capacity {
            Some(c) => {
                let (shard, cap) = c.shard_and_cap(tenant, key);
                (shard as u64, cap)
            }
            // No shard: 14 bits of the tenant keep a tenant's identities in one cluster slot.
            None => (tenant.hi >> 50, 0),
        };
        let prefix = &self.prefix;
        inv.key(format!(
            "{prefix}:{{{shard}}}:i:{:016x}{:016x}",
            digest.hi, digest.lo
        ));
        let (window, slots) = capacity.map_or((0, 0), |c| c.window_micros());
        if capacity.is_some() {
            inv.key(format!(
                "{prefix}:{{{shard}}}:t:{:016x}{:016x}",
                tenant.hi, tenant.lo
            ))
            .key(format!("{prefix}:{{{shard}}}:s"));
        }
        inv.arg(if charge { "1" } else { "0" })
            .arg(bt)
            .arg(btau)
            .arg(st)
            .arg(stau)
            .arg(window)
            .arg(slots)
            .arg(cap)
            .arg(self.margin_ms);
        let mut conn = self.conn.clone();
        let reply = inv.invoke_async::<ScriptReply>(&mut conn);
        match tokio::time::timeout(cfg.store_timeout, reply).await {
            Ok(Ok(answer)) => Some(answer),
            _ => None,
        }
    }
}

const STORE_UNAVAILABLE: Decision = Decision::Unavailable {
    retry_after: None,
    cause: Cause::StoreUnavailable,
};

/// The script's reply as a decision: the outcome it numbered (the script refuses only for
/// buckets and shared capacity, so a reply naming anything else, or nothing, fails closed).
fn script_decision(outcome: u8, wait_us: u64) -> Decision {
    let wait = Some(Duration::from_micros(wait_us));
    match Outcome::from_index(outcome.into()) {
        Some(
            o @ (Outcome::Admitted
            | Outcome::ThrottledBurst
            | Outcome::ThrottledSustained
            | Outcome::TenantShare
            | Outcome::ShardFull),
        ) => o.decision(wait),
        _ => STORE_UNAVAILABLE,
    }
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("profile", &self.engine.config.load().profile.name)
            .field("prefix", &self.prefix)
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
}
