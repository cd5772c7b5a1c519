//! Where the Redis backend's state lives: the connection, the decision script, and the keys it
//! touches. One call is one `EVALSHA`; see `admit.lua` for the arguments and number ranges.

use crate::sync::unmodelled::{AtomicU64, Ordering};
use core::time::Duration;
use std::time::Instant;

use ::redis::Script;

use super::connection::Connection;
use crate::config::Config;
use crate::decision::{Cause, Decision, Outcome};
use crate::identity::{Digest, Key};
use crate::published::PublishedBucket;

/// The decision script; see its header for the arguments and the number ranges.
const SCRIPT: &str = include_str!("admit.lua");

/// Gives back one admitted call's charge (`admit_all`); see its header.
const REFUND: &str = include_str!("refund.lua");

/// What the script replied: ([`Outcome::index`] or [`EXPIRED`], wait in us, server time in us
/// since the Unix epoch).
type ScriptReply = (u8, u64, u64);

/// The script's answer to a charging call that reached it past its deadline: nothing was
/// charged (the caller has already been answered 503).
const EXPIRED: u8 = 255;

/// The store: one connection (re-established in the background) and the loaded script.
pub(super) struct Store {
    conn: Connection,
    script: Script,
    refund: Script,
    pub(super) prefix: Box<str>,
    margin_ms: u64,
    /// The server's clock against ours, for the deadline a charging call carries.
    clock: ServerClock,
}

/// A conservative estimate of `server time - local time` (both in microseconds; local time is
/// a monotonic clock from `base`): the largest lower bound seen. A reply stamped `s` by the
/// server to a call sent at local `l0` and answered at `l1` means the offset is within
/// `[s - l1, s - l0]` (the server ran the script in between); the estimate only grows with new
/// lower bounds, except that a sample whose upper bound is below it (the server's clock stepped
/// back, or another server answers after a failover) replaces it. Never above the true offset
/// while the clocks hold still, so a deadline computed with it is never later than the
/// caller's own.
struct ServerClock {
    base: Instant,
    /// The estimate; 0 until the first sample (then no deadline is sent).
    offset: AtomicU64,
}

impl ServerClock {
    fn local_micros(&self) -> u64 {
        self.base.elapsed().as_micros() as u64
    }

    /// Learns from one reply: the server's time `server` for a call sent at `sent` and answered
    /// at `answered` (local microseconds).
    fn observe(&self, server: u64, sent: u64, answered: u64) {
        let (lo, hi) = (server.saturating_sub(answered), server.saturating_sub(sent));
        let mut cur = self.offset.load(Ordering::Relaxed);
        loop {
            let next = if cur > hi { lo } else { cur.max(lo) };
            if next == cur {
                return;
            }
            match self
                .offset
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    /// The server time after which a call sent at local `sent`, whose caller gives up `budget`
    /// later, must charge nothing: `sent + budget` on the server's clock, less a tenth of the
    /// budget for the reply's way back. 0 (no deadline) before the first sample.
    fn deadline(&self, sent: u64, budget: Duration) -> u64 {
        let offset = self.offset.load(Ordering::Relaxed);
        if offset == 0 {
            return 0;
        }
        let budget = budget.as_micros() as u64;
        offset + sent + budget - budget / 10
    }
}

impl Store {
    /// Loads the script on `conn`.
    pub(super) async fn new(
        mut conn: Connection,
        prefix: String,
        margin: Duration,
    ) -> Result<Store, ::redis::RedisError> {
        let script = Script::new(SCRIPT);
        script.prepare_invoke().load_async(&mut conn).await?;
        let refund = Script::new(REFUND);
        refund.prepare_invoke().load_async(&mut conn).await?;
        let clock = ServerClock {
            base: Instant::now(),
            offset: AtomicU64::new(0),
        };
        // The first sample, so that the first decision already carries a deadline.
        let sent = clock.local_micros();
        let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query_async(&mut conn).await?;
        clock.observe(secs * 1_000_000 + micros, sent, clock.local_micros());
        Ok(Store {
            conn,
            script,
            refund,
            prefix: prefix.into(),
            margin_ms: margin.as_millis() as u64,
            clock,
        })
    }

    /// One `EVALSHA`, bounded by the profile's `store.timeout`: the decision, the server
    /// time it was made at, and whether an admission left less than `observability.near_limit`
    /// of the burst; or a fail-closed refusal and `None` on any failure. A charging call
    /// carries its deadline on the server's clock (see [`ServerClock`]): the script charges
    /// nothing past it, so a call this side gave up on (503) is never charged later. `n` is the
    /// cost (at least 1, at most the class's smaller bucket: the caller checked).
    pub(super) async fn call(
        &self,
        cfg: &Config,
        key: &Key<'_>,
        (digest, tenant): (Digest, Digest),
        charge: bool,
        n: u32,
    ) -> (Decision, Option<u64>, bool) {
        let class = &cfg.published.route_classes[key.class.0 as usize];
        let ([bt, btau], [st, stau]) = (micros(&class.burst), micros(&class.sustained));
        let mut inv = self.script.prepare_invoke();
        let cap = self.keys(&mut inv, cfg, key, digest, tenant);
        let (window, slots) = cfg.capacity.as_ref().map_or((0, 0), |c| c.window_micros());
        inv.arg(if charge { "1" } else { "0" })
            .arg(bt)
            .arg(btau)
            .arg(st)
            .arg(stau)
            .arg(window)
            .arg(slots)
            .arg(cap)
            .arg(self.margin_ms);
        // Taken before the timeout starts: the caller gives up no earlier than this plus it.
        let sent = self.clock.local_micros();
        let deadline = if charge {
            self.clock.deadline(sent, cfg.store_timeout)
        } else {
            0
        };
        inv.arg(deadline).arg(n);
        let mut conn = self.conn.clone();
        let reply = inv.invoke_async::<ScriptReply>(&mut conn);
        match tokio::time::timeout(cfg.store_timeout, reply).await {
            Ok(Ok((outcome, wait, now))) => {
                self.clock.observe(now, sent, self.clock.local_micros());
                let mut decision = script_decision(outcome, wait);
                // A cost above the tenant's cap or the shard's slots never fits: no wait.
                if let Decision::Unavailable { retry_after, cause } = &mut decision {
                    let never = match cause {
                        Cause::TenantShare => u64::from(n) > cap,
                        Cause::ShardFull => u64::from(n) > slots,
                        _ => false,
                    };
                    if never {
                        *retry_after = None;
                    }
                }
                // An admission's `wait` is its burst's debt (us): near the limit when fewer
                // than `k` tokens are left, `debt > tau - k * t` (see `config`).
                let k = cfg.class(key.class).near_limit_tokens;
                let near = decision.is_admit() && wait > btau.saturating_sub(k * bt);
                (decision, Some(now), near)
            }
            _ => (STORE_UNAVAILABLE, None, false),
        }
    }

    /// Gives back what an admitted call of cost `n` decided at server time `now` charged (see
    /// `refund.lua`), bounded by the timeout. A refund that fails leaves the caller charged:
    /// never more admitted than the limits allow.
    pub(super) async fn refund(
        &self,
        cfg: &Config,
        key: &Key<'_>,
        (digest, tenant): (Digest, Digest),
        n: u32,
        now: u64,
    ) {
        let class = &cfg.published.route_classes[key.class.0 as usize];
        let ([bt, _], [st, _]) = (micros(&class.burst), micros(&class.sustained));
        let mut inv = self.refund.prepare_invoke();
        self.keys(&mut inv, cfg, key, digest, tenant);
        let (window, _) = cfg.capacity.as_ref().map_or((0, 0), |c| c.window_micros());
        let end = if window > 0 {
            now - now % window + window
        } else {
            0
        };
        let n64 = u64::from(n);
        inv.arg(bt * n64).arg(st * n64).arg(end).arg(n);
        let mut conn = self.conn.clone();
        let reply = inv.invoke_async::<u8>(&mut conn);
        let _ = tokio::time::timeout(cfg.store_timeout, reply).await;
    }

    /// Adds the keys a decision touches to `inv` (identity, then tenant and shard with shared
    /// capacity) and returns the tenant's cap of its shard's slots (0 without capacity).
    fn keys(
        &self,
        inv: &mut ::redis::ScriptInvocation<'_>,
        cfg: &Config,
        key: &Key<'_>,
        digest: Digest,
        tenant: Digest,
    ) -> u64 {
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
        if capacity.is_some() {
            inv.key(format!(
                "{prefix}:{{{shard}}}:t:{:016x}{:016x}",
                tenant.hi, tenant.lo
            ))
            .key(format!("{prefix}:{{{shard}}}:s"));
        }
        cap
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
/// buckets and shared capacity, so a reply naming anything else, or nothing, fails closed;
/// [`EXPIRED`], a call that reached the script past its deadline, does too).
fn script_decision(outcome: u8, wait_us: u64) -> Decision {
    if outcome == EXPIRED {
        return STORE_UNAVAILABLE;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn clock() -> ServerClock {
        ServerClock {
            base: Instant::now(),
            offset: AtomicU64::new(0),
        }
    }

    #[test]
    fn offset_keeps_the_largest_lower_bound() {
        let c = clock();
        assert_eq!(
            c.deadline(5, Duration::from_millis(50)),
            0,
            "no sample, no deadline"
        );
        // Sent at 100, answered at 300, stamped 1_000_250: offset in [999_950, 1_000_150].
        c.observe(1_000_250, 100, 300);
        assert_eq!(c.offset.load(Ordering::Relaxed), 999_950);
        // A slower sample (lower lower bound) changes nothing; a faster one raises it.
        c.observe(1_001_000, 1_000, 2_000);
        assert_eq!(c.offset.load(Ordering::Relaxed), 999_950);
        c.observe(1_002_040, 2_000, 2_050);
        assert_eq!(c.offset.load(Ordering::Relaxed), 999_990);
        // Deadline: sent + offset + 50 ms less a tenth.
        assert_eq!(
            c.deadline(3_000, Duration::from_millis(50)),
            3_000 + 999_990 + 45_000
        );
    }

    #[test]
    fn a_sample_below_the_estimate_replaces_it() {
        let c = clock();
        c.observe(20_000_250, 100, 300);
        assert_eq!(c.offset.load(Ordering::Relaxed), 19_999_950);
        // The server's clock stepped back 10 s: this sample's upper bound is below the estimate.
        c.observe(10_000_500, 400, 500);
        assert_eq!(c.offset.load(Ordering::Relaxed), 10_000_000);
    }

    #[test]
    fn expired_fails_closed() {
        assert_eq!(script_decision(EXPIRED, 0), STORE_UNAVAILABLE);
        assert_eq!(script_decision(0, 0), Decision::Admit);
    }
}
