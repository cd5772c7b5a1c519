//! Connecting: the builder and the key secret.

use core::time::Duration;
use std::sync::Arc;
use std::time::Instant;

use super::connect_error::ConnectError;
use super::connection::Connection;
use super::deny::DenyCache;
use super::lease::Leases;
use super::script::Store;
use super::telemetry::LeaseMetrics;
use super::topology::Topology;
use super::RedisLimiter;
use crate::engine::{random_secret, Engine, ObserveOptions};
use crate::profile::Profile;

/// The environment variable that sets the key secret (unless the builder does).
pub use crate::limiter::KEY_SECRET_ENV;

/// Builds a [`RedisLimiter`]: `RedisLimiter::builder(url, profile).key_secret(s).connect().await`.
pub struct RedisBuilder {
    pub(super) url: String,
    pub(super) profile: Profile,
    pub(super) secret: Option<Vec<u8>>,
    pub(super) prefix: String,
    pub(super) deny_cache: usize,
    pub(super) connect_timeout: Duration,
    pub(super) margin: Duration,
    pub(super) observe: ObserveOptions,
    pub(super) replica_acks: u32,
    pub(super) redis_module: bool,
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

    /// How long a key outlives the instant it stops mattering (default 100ms), at least: a small
    /// margin against the rounding of expiries to milliseconds. An identity's key may live up to
    /// an eighth of its remaining time longer, which spares rewriting its expiry on most charges.
    pub fn expiry_margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// How many replicas must hold a decision's writes before it counts (`WAIT` after each
    /// script call, on the node that ran it; fewer within the profile's `store.timeout` fails
    /// the decision closed). Default 0, on every topology: a round trip less per decision, but
    /// a failover may forget the last admissions the old primary had not yet replicated (a
    /// caller then gets them again). 1 on a Redis Cluster or with Sentinels means a failover
    /// never forgets an admission, at the price of refusing while a shard has no replica. See
    /// the guide's Redis chapter (`tollgate::guide::redis`) for what each costs.
    pub fn replica_acks(mut self, replicas: u32) -> Self {
        self.replica_acks = replicas;
        self
    }

    /// Whether to decide with tollgate's Redis module (`redis-module/`: `tollgate.admit`) where
    /// the server has it loaded (default true; looked for at connect). `false` always uses the
    /// Redis function, as on a server without the module. Both make the same decisions on the
    /// same keys; see the guide's Redis chapter (`tollgate::guide::redis`).
    pub fn redis_module(mut self, on: bool) -> Self {
        self.redis_module = on;
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
        let topology = Topology::parse(&self.url)?;
        let mut conn = Connection::open(
            &topology,
            self.connect_timeout,
            self.replica_acks,
            self.profile.store.timeout.get() / 2,
        )
        .await?;
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
        let identities = self.profile.identities.capacity.get() as usize;
        let store = Arc::new(Store::new(conn, self.prefix, self.margin, self.redis_module).await?);
        let leases = Arc::new(Leases::new(identities));
        let (lease_metrics, started) = (LeaseMetrics::new(), Instant::now());
        tokio::spawn(super::leased::sweep(
            Arc::downgrade(&leases),
            store.clone(),
            lease_metrics.clone(),
            started,
        ));
        Ok(RedisLimiter {
            engine: Engine::new(self.profile, &secret, self.observe),
            store,
            leases,
            lease_metrics,
            runtime: tokio::runtime::Handle::current(),
            deny: (self.deny_cache > 0).then(|| DenyCache::new(self.deny_cache)),
            started,
            metrics: super::telemetry::StoreMetrics::new(),
            subscribe_url: topology.subscribe_url(),
        })
    }
}

/// The secret kept in Redis: created once by the first worker (`SET NX`), then read by all, and
/// on the replicas (if the builder asks for acknowledgements) before anyone uses it: a secret a
/// failover forgot would split every identity's budget in two.
async fn stored_secret(conn: &mut Connection, prefix: &str) -> Result<Vec<u8>, ConnectError> {
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
    conn.wait_for_replicas().await?;
    Ok(secret.into_bytes())
}
