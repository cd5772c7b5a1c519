//! Where the Redis backend's state lives: the connection, the decision script, and the keys it
//! touches. One call is one `EVALSHA`; see `admit.lua` for the arguments and number ranges.

use core::time::Duration;

use ::redis::aio::ConnectionManager;
use ::redis::Script;

use crate::config::Config;
use crate::decision::{Cause, Decision, Outcome};
use crate::identity::{Digest, Key};
use crate::published::PublishedBucket;

/// The decision script; see its header for the arguments and the number ranges.
const SCRIPT: &str = include_str!("admit.lua");

/// What the script replied: ([`Outcome::index`], wait in us, server time in us since the Unix
/// epoch).
type ScriptReply = (u8, u64, u64);

/// The store: one connection (re-established in the background) and the loaded script.
pub(super) struct Store {
    conn: ConnectionManager,
    script: Script,
    pub(super) prefix: Box<str>,
    margin_ms: u64,
}

impl Store {
    /// Loads the script on `conn`.
    pub(super) async fn new(
        mut conn: ConnectionManager,
        prefix: String,
        margin: Duration,
    ) -> Result<Store, ::redis::RedisError> {
        let script = Script::new(SCRIPT);
        script.prepare_invoke().load_async(&mut conn).await?;
        Ok(Store {
            conn,
            script,
            prefix: prefix.into(),
            margin_ms: margin.as_millis() as u64,
        })
    }

    /// One `EVALSHA`, bounded by the profile's `store.timeout`: the decision and the server
    /// time it was made at, or a fail-closed refusal and `None` on any failure.
    pub(super) async fn call(
        &self,
        cfg: &Config,
        key: &Key<'_>,
        digest: Digest,
        tenant: Digest,
        charge: bool,
    ) -> (Decision, Option<u64>) {
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
            Ok(Ok((outcome, wait, now))) => (script_decision(outcome, wait), Some(now)),
            _ => (STORE_UNAVAILABLE, None),
        }
    }
}

/// A bucket as the script takes it: emission interval `t` and tolerance `tau`, in microseconds
/// (`t = ceil(per_us / tokens)`, never granting more than `tokens / per`).
fn micros(b: &PublishedBucket) -> [u64; 2] {
    let t = b.per.as_nanos().div_ceil(1_000).div_ceil(b.tokens);
    [t, t * b.tokens]
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
