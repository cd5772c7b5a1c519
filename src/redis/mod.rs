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

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::Script;
use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::config::Config;
use crate::decision::{BucketKind, Cause, Decision};
use crate::identity::{Digest, Key, KeyHasher, RouteClass};
use crate::limiter::{class_of, random_secret, Limiter, Verdict};
use crate::profile::{Period, Profile, ProfileError};

mod deny;

use deny::DenyCache;

/// The decision script; see its header for the arguments and the number ranges.
const SCRIPT: &str = include_str!("admit.lua");

/// The environment variable that sets the key secret (unless the builder does).
pub const KEY_SECRET_ENV: &str = "TOLLGATE_KEY_SECRET";

/// A limiter whose buckets and shard slots live in Redis, shared by every worker that connects
/// with the same profile. `Send + Sync`; clone nothing, share it by `&` or `Arc`.
pub struct RedisLimiter {
    conn: ConnectionManager,
    script: Script,
    state: ArcSwap<State>,
    hasher: KeyHasher,
    prefix: Box<str>,
    margin_ms: u64,
    deny: Option<DenyCache>,
    /// Serialises reloads (never taken by `admit`).
    reload_lock: Mutex<()>,
}

/// The profile as the script needs it, swapped whole by `reload`.
struct State {
    config: Config,
    /// Per route class: burst `t`, `tau`, sustained `t`, `tau` in microseconds.
    classes: Box<[[u64; 4]]>,
    /// `(window_us, slots)` with shared capacity.
    window: Option<(u64, u64)>,
    timeout: Duration,
}

impl State {
    fn new(config: Config) -> State {
        let p = &config.profile;
        let rate = |tokens: u64, per: Period| {
            let t = per.as_nanos().div_ceil(1_000).div_ceil(tokens);
            [t, t * tokens]
        };
        let classes = config
            .classes
            .iter()
            .map(|c| {
                let l = p.route_class(&c.name).expect("config follows profile");
                let [bt, btau] = rate(l.burst.tokens.get(), l.burst.per);
                let [st, stau] = rate(l.sustained.tokens.get(), l.sustained.per);
                [bt, btau, st, stau]
            })
            .collect();
        let window = config
            .capacity
            .as_ref()
            .map(|c| (c.window_ns.div_ceil(1_000), c.slots_per_window));
        State {
            timeout: p.store.timeout.get(),
            classes,
            window,
            config,
        }
    }
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
    /// The profile is invalid (built or changed in Rust): the same refusal as
    /// parsing it would give.
    Profile(ProfileError),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Store(e) => write!(f, "redis: {e}"),
            ConnectError::Timeout(d) => write!(f, "redis did not answer within {d:?}"),
            ConnectError::EmptySecret => f.write_str("key secret must not be empty"),
            ConnectError::Profile(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Store(e) => Some(e),
            ConnectError::Profile(e) => Some(e),
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

    /// Validates the profile, connects, settles the key secret and loads the script. Fails if
    /// the server cannot be reached within the connect timeout; once connected, outages only
    /// fail decisions closed.
    pub async fn connect(self) -> Result<RedisLimiter, ConnectError> {
        self.profile.validate().map_err(ConnectError::Profile)?;
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
        let anon = self.profile.anonymous;
        let hasher = KeyHasher::new(&secret, anon.ipv4_prefix.get(), anon.ipv6_prefix.get());
        let config = Config::new(self.profile, |t| hasher.tenant_digest(Some(t)));
        Ok(RedisLimiter {
            conn,
            script,
            state: ArcSwap::from_pointee(State::new(config)),
            hasher,
            prefix: self.prefix.into(),
            margin_ms: self.margin.as_millis() as u64,
            deny: (self.deny_cache > 0).then(|| DenyCache::new(self.deny_cache)),
            reload_lock: Mutex::new(()),
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

/// What the script answered: (outcome, wait in us, server time in us since the Unix epoch).
type Answer = (u8, u64, u64);

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
        }
    }

    /// The handle of a route class, or `None` if the profile has no such class. Handles stay
    /// valid across reloads; workers with the same profile (and reloads) number them alike.
    pub fn route_class(&self, name: &str) -> Option<RouteClass> {
        self.state.load().config.route_class(name)
    }

    /// The profile in force (a snapshot).
    pub fn profile(&self) -> Arc<Profile> {
        self.state.load().config.profile.clone()
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
        let _one_at_a_time = self.reload_lock.lock();
        let config = self
            .state
            .load()
            .config
            .reload(profile, |t| self.hasher.tenant_digest(Some(t)))?;
        self.state.store(Arc::new(State::new(config)));
        if let Some(deny) = &self.deny {
            deny.clear();
        }
        Ok(())
    }

    async fn decide(&self, key: &Key<'_>, charge: bool) -> (Verdict, Option<u64>) {
        let state = self.state.load_full();
        let shadow = class_of(&state.config, key.class).shadow;
        let (digest, tenant) = self.hasher.digests(key);
        let verdict = |computed| Verdict {
            decision: if shadow { Decision::Admit } else { computed },
            computed,
        };
        if let Some(cached) = self.deny.as_ref().and_then(|d| d.get(digest)) {
            return (verdict(cached), None);
        }
        let (computed, now) = match self.call(&state, key, digest, tenant, charge).await {
            Some((outcome, wait, now)) => (outcome_decision(outcome, wait), Some(now)),
            None => (STORE_UNAVAILABLE, None),
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
        (verdict(computed), now)
    }

    /// One `EVALSHA`, bounded by the profile's `store.timeout`; `None` on any failure.
    async fn call(
        &self,
        state: &State,
        key: &Key<'_>,
        digest: Digest,
        tenant: Digest,
        charge: bool,
    ) -> Option<Answer> {
        let [bt, btau, st, stau] = state.classes[key.class.0 as usize];
        let mut inv = self.script.prepare_invoke();
        let capacity = state.config.capacity.as_ref();
        let (shard, cap) = match capacity {
            Some(c) => {
                let (shard, cap) = Limiter::shard_and_cap(c, tenant, key);
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
        let (window, slots) = state.window.unwrap_or((0, 0));
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
        match tokio::time::timeout(state.timeout, inv.invoke_async::<Answer>(&mut conn)).await {
            Ok(Ok(answer)) => Some(answer),
            _ => None,
        }
    }
}

const STORE_UNAVAILABLE: Decision = Decision::Unavailable {
    retry_after: None,
    cause: Cause::StoreUnavailable,
};

/// The script's answer as a decision; anything unexpected fails closed.
fn outcome_decision(outcome: u8, wait_us: u64) -> Decision {
    let wait = Duration::from_micros(wait_us);
    match outcome {
        0 => Decision::Admit,
        1 => Decision::Throttle {
            retry_after: wait,
            bucket: BucketKind::Burst,
        },
        2 => Decision::Throttle {
            retry_after: wait,
            bucket: BucketKind::Sustained,
        },
        3 => Decision::Unavailable {
            retry_after: Some(wait),
            cause: Cause::TenantShare,
        },
        4 => Decision::Unavailable {
            retry_after: Some(wait),
            cause: Cause::ShardFull,
        },
        _ => STORE_UNAVAILABLE,
    }
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("profile", &self.state.load().config.profile.name)
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
