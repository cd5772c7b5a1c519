//! Where the Redis backend's state lives: the connection, the decision program (see
//! `program.rs`: tollgate's module, the Redis function or a script), and the keys and arguments
//! of one decision; see `admit.lua` for the arguments and number ranges.

use core::time::Duration;

use ::redis::{ErrorKind, RedisError};

use super::clock::ServerClock;
use std::sync::Arc;

use super::connection::Connection;
use super::program::{Entry, Program};
use crate::config::Config;
use crate::decision::{Cause, Decision, Outcome};
use crate::identity::{Digest, Key, RouteClass};
use crate::published::PublishedBucket;
use arc_swap::ArcSwap;
use parking_lot::{Mutex, MutexGuard};

/// What the script replied: ([`Outcome::index`] or [`EXPIRED`], wait in us, server time in us
/// since the Unix epoch).
type ScriptReply = (u8, u64, u64);

/// The script's answer to a charging call that reached it past its deadline: nothing was
/// charged (the caller has already been answered 503).
const EXPIRED: u8 = 255;

/// Why a call to the store gave no decision (all of them fail closed); the label of
/// `tollgate_store_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Failure {
    /// No answer within the profile's `store.timeout`.
    Timeout,
    /// Connecting, a dropped connection, or an I/O error.
    Connection,
    /// The server ran the code and it failed, or refused it (OOM, read-only replica, busy).
    Script,
    /// An answer that is not the script's reply.
    Reply,
    /// The call reached the server past its deadline and charged nothing.
    Expired,
}

impl Failure {
    /// The metric label.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(super) fn label(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Connection => "connection",
            Failure::Script => "script",
            Failure::Reply => "reply",
            Failure::Expired => "expired",
        }
    }

    fn of(e: &RedisError) -> Failure {
        if e.is_timeout() {
            Failure::Timeout
        } else if e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error()
        {
            Failure::Connection
        } else if matches!(e.kind(), ErrorKind::UnexpectedReturnType | ErrorKind::Parse) {
            Failure::Reply
        } else {
            Failure::Script
        }
    }
}

/// The store: one connection (re-established in the background) and the loaded programs.
pub(super) struct Store {
    conn: Connection,
    program: Program,
    pub(super) prefix: Box<str>,
    margin_ms: u64,
    /// The server's clock against ours, for the deadline a charging call carries.
    clock: ServerClock,
    /// Per route class (by number), when its current emission intervals took effect at this
    /// worker, in microseconds on the server's clock as [`ServerClock`] estimates it: a value
    /// counted in other intervals is converted as of this instant, or of its last charge if
    /// later (see `admit.lua`). A class not listed took effect at `connected`.
    since: ArcSwap<Vec<u64>>,
    /// The server's time when this worker connected (its first profile took effect).
    connected: u64,
    /// Held across a reload, so that two reloads pair each profile with its own instants.
    reloading: Mutex<()>,
}

/// One decision the store made.
#[derive(Clone, Copy, Debug)]
pub(super) struct Answer {
    pub(super) decision: Decision,
    /// The server time it was made at (us since the Unix epoch).
    pub(super) now: u64,
    /// Whether an admission left less than `observability.near_limit` of the burst.
    pub(super) near: bool,
    /// Whole tokens an admission left in the burst bucket (0 for a refusal).
    pub(super) burst_left: u64,
}

/// Whose buckets a call charges or refunds: what the keys are made from besides the digests.
#[derive(Clone, Copy, Debug)]
pub(super) struct Owner {
    pub(super) class: RouteClass,
    /// An authenticated caller's tenant (not the anonymous pseudo-tenant).
    pub(super) authenticated: bool,
}

impl Owner {
    pub(super) fn of(key: &Key<'_>) -> Owner {
        Owner {
            class: key.class,
            authenticated: key.tenant().is_some(),
        }
    }
}

/// Where one decision's state lives (see `admit.lua`).
struct Place {
    /// The identity, then (with shared capacity) the shard's capacity hash.
    keys: Vec<String>,
    /// The tenant's field in the capacity hash (with shared capacity).
    field: Option<String>,
    /// The tenant's cap of its shard's slots (0 without capacity).
    cap: u64,
}

impl Store {
    /// The store's connection (shared: clones use the same sockets).
    pub(super) fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Finds or loads the program on `conn` (tollgate's module if `use_module` and the server
    /// has it, else the function library, else scripts; see `program.rs`).
    pub(super) async fn new(
        mut conn: Connection,
        prefix: String,
        margin: Duration,
        use_module: bool,
    ) -> Result<Store, RedisError> {
        let program = Program::load(&mut conn, use_module).await?;
        let clock = ServerClock::new();
        // The first sample, so that the first decision already carries a deadline.
        let sent = clock.local_micros();
        let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query_async(&mut conn).await?;
        let server = secs * 1_000_000 + micros;
        clock.observe(server, sent, clock.local_micros());
        Ok(Store {
            conn,
            program,
            prefix: prefix.into(),
            margin_ms: margin.as_millis() as u64,
            clock,
            since: ArcSwap::from_pointee(Vec::new()),
            connected: server,
            reloading: Mutex::new(()),
        })
    }

    /// The server time now, as estimated (see [`ServerClock::server_micros`]).
    pub(super) fn server_now(&self) -> u64 {
        self.clock.server_micros(self.clock.local_micros())
    }

    /// Held by a reload from before its profile is published until [`Store::reloaded`].
    pub(super) fn reloading(&self) -> MutexGuard<'_, ()> {
        self.reloading.lock()
    }

    /// Records that `new` replaced `old` at `at` (server microseconds, taken before
    /// publishing): classes whose emission intervals changed (or that are new) took effect
    /// then, the others keep their instant. A decision that pairs one profile with the other's
    /// instants converts as of an instant no earlier than the stored value's last charge all
    /// the same (`admit.lua`), so either pairing is sound.
    pub(super) fn reloaded(&self, old: &Config, new: &Config, at: u64) {
        let prev = self.since.load();
        let intervals = |cfg: &Config, i: usize| {
            let c = cfg.published.route_classes.get(i)?;
            Some((micros(&c.burst)[0], micros(&c.sustained)[0]))
        };
        let next = (0..new.published.route_classes.len())
            .map(|i| match intervals(old, i) {
                Some(t) if Some(t) == intervals(new, i) => {
                    prev.get(i).copied().unwrap_or(self.connected)
                }
                _ => at,
            })
            .collect();
        self.since.store(Arc::new(next));
    }

    /// When `class`'s current intervals took effect (see `since`).
    fn since(&self, class: usize) -> u64 {
        self.since
            .load()
            .get(class)
            .copied()
            .unwrap_or(self.connected)
    }

    /// The keys a decision for `owner` touches, the tenant's field and its cap.
    fn place(&self, cfg: &Config, owner: Owner, digest: Digest, tenant: Digest) -> Place {
        let capacity = cfg.capacity.as_ref();
        let (shard, cap) = match capacity {
            Some(c) => {
                let (shard, cap) = c.shard_and_cap(tenant, owner.authenticated);
                (shard as u64, cap)
            }
            // No shard: 14 bits of the tenant keep a tenant's identities in one cluster slot.
            None => (tenant.hi >> 50, 0),
        };
        let prefix = &self.prefix;
        let mut keys = vec![format!(
            "{prefix}:{{{shard}}}:i:{:016x}{:016x}",
            digest.hi, digest.lo
        )];
        let field = capacity.map(|_| {
            keys.push(format!("{prefix}:{{{shard}}}:c"));
            format!("{:016x}{:016x}", tenant.hi, tenant.lo)
        });
        Place { keys, field, cap }
    }

    /// The keys and arguments of one decision (see `admit.lua`): `n` tokens to charge (0 for a
    /// peek) and the deadline; and the tenant's cap.
    fn words(
        &self,
        cfg: &Config,
        key: &Key<'_>,
        (digest, tenant): (Digest, Digest),
        n: u32,
        deadline: u64,
    ) -> (Vec<String>, Vec<String>, u64) {
        let class = &cfg.published.route_classes[key.class.0 as usize];
        let ([bt, btau], [st, stau]) = (micros(&class.burst), micros(&class.sustained));
        let place = self.place(cfg, Owner::of(key), digest, tenant);
        let (window, slots) = cfg.capacity.as_ref().map_or((0, 0), |c| c.window_micros());
        let mut args = vec![
            format!(
                "{bt} {btau} {st} {stau} {} {window} {slots} {}",
                self.margin_ms, place.cap
            ),
            n.to_string(),
            deadline.to_string(),
            self.since(key.class.0 as usize).to_string(),
        ];
        args.extend(place.field);
        (place.keys, args, place.cap)
    }

    /// One decision, bounded by the profile's `store.timeout`: the decision, the server time it
    /// was made at and whether an admission left less than `observability.near_limit` of the
    /// burst; or why there is none (the caller fails closed). A charging call carries its
    /// deadline on the server's clock (see [`ServerClock`]): the code charges nothing past it,
    /// so a call this side gave up on (503) is never charged later. `n` is the cost (at least
    /// 1, at most the class's smaller bucket: the caller checked); a peek is checked as for `n`
    /// and charges nothing.
    pub(super) async fn call(
        &self,
        cfg: &Config,
        key: &Key<'_>,
        digests: (Digest, Digest),
        charge: bool,
        n: u32,
    ) -> Result<Answer, Failure> {
        let class = &cfg.published.route_classes[key.class.0 as usize];
        let [bt, btau] = micros(&class.burst);
        // Taken before the timeout starts: the caller gives up no earlier than this plus it.
        let sent = self.clock.local_micros();
        let (cost, deadline) = if charge {
            (n, self.clock.deadline(sent, cfg.store_timeout))
        } else {
            (0, 0)
        };
        let (keys, args, cap) = self.words(cfg, key, digests, cost, deadline);
        let reply = self
            .program
            .run::<ScriptReply>(&self.conn, Entry::Admit, &keys, &args);
        let (outcome, wait, now) = match tokio::time::timeout(cfg.store_timeout, reply).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => return Err(Failure::of(&e)),
            Err(_) => return Err(Failure::Timeout),
        };
        self.clock.observe(now, sent, self.clock.local_micros());
        let mut decision = script_decision(outcome, wait)?;
        // A cost above the tenant's cap or the shard's slots never fits: no wait.
        if let Decision::Unavailable { retry_after, cause } = &mut decision {
            let slots = cfg.capacity.as_ref().map_or(0, |c| c.window_micros().1);
            let never = match cause {
                Cause::TenantShare => u64::from(n) > cap,
                Cause::ShardFull => u64::from(n) > slots,
                _ => false,
            };
            if never {
                *retry_after = None;
            }
        }
        // An admission's `wait` is its burst's debt (us): near the limit when fewer than `k`
        // tokens are left, `debt > tau - k * t` (see `config`).
        let k = cfg.class(key.class).near_limit_tokens;
        let near = decision.is_admit() && wait > btau.saturating_sub(k * bt);
        let burst_left = if decision.is_admit() {
            btau.saturating_sub(wait) / bt.max(1)
        } else {
            0
        };
        Ok(Answer {
            decision,
            now,
            near,
            burst_left,
        })
    }

    /// Gives back `n` tokens of what an admitted call decided at server time `now` charged
    /// (see `refund.lua`), bounded by the timeout; whether the store took them back. A refund
    /// that fails leaves the caller charged: never more admitted than the limits allow.
    pub(super) async fn refund(
        &self,
        cfg: &Config,
        owner: Owner,
        (digest, tenant): (Digest, Digest),
        n: u32,
        now: u64,
    ) -> bool {
        let Some(class) = cfg.published.route_classes.get(owner.class.0 as usize) else {
            return false;
        };
        let ([bt, _], [st, _]) = (micros(&class.burst), micros(&class.sustained));
        let place = self.place(cfg, owner, digest, tenant);
        let end = Store::window_end(cfg, now).unwrap_or(0);
        let n64 = u64::from(n);
        let mut args = vec![
            (bt * n64).to_string(),
            (st * n64).to_string(),
            end.to_string(),
            n.to_string(),
        ];
        args.extend(place.field);
        let reply = self
            .program
            .run::<u8>(&self.conn, Entry::Refund, &place.keys, &args);
        matches!(
            tokio::time::timeout(cfg.store_timeout, reply).await,
            Ok(Ok(_))
        )
    }

    /// The server time (us) at which the capacity window holding `now` ends, or `None`
    /// without shared capacity.
    pub(super) fn window_end(cfg: &Config, now: u64) -> Option<u64> {
        let (window, _) = cfg.capacity.as_ref()?.window_micros();
        (window > 0).then(|| now - now % window + window)
    }

    /// What decides: `module`, `function` or `script`.
    pub(super) fn program(&self) -> &'static str {
        self.program.label()
    }

    /// The command one decision sends, as words (`FCALL name numkeys keys.. args..` or
    /// `EVALSHA sha numkeys ..`), for benchmarks that replay it with `redis-benchmark`.
    #[cfg(feature = "test-util")]
    pub(super) fn command(
        &self,
        cfg: &Config,
        key: &Key<'_>,
        digest: Digest,
        tenant: Digest,
    ) -> Vec<String> {
        let (keys, args, _) = self.words(cfg, key, (digest, tenant), 1, 0);
        self.program.words(keys, args)
    }
}

/// A bucket as the script takes it: emission interval `t` and tolerance `tau`, in microseconds
/// (`t = ceil(per_us / tokens)`, never granting more than `tokens / per`).
fn micros(b: &PublishedBucket) -> [u64; 2] {
    let t = b.per.as_nanos().div_ceil(1_000).div_ceil(b.tokens);
    [t, t * b.tokens]
}

/// The script's reply as a decision: the outcome it numbered (the script refuses only for
/// buckets and shared capacity, so a reply naming anything else fails closed; [`EXPIRED`], a
/// call that reached the script past its deadline, does too).
fn script_decision(outcome: u8, wait_us: u64) -> Result<Decision, Failure> {
    if outcome == EXPIRED {
        return Err(Failure::Expired);
    }
    let wait = Some(Duration::from_micros(wait_us));
    match Outcome::from_index(outcome.into()) {
        Some(
            o @ (Outcome::Admitted
            | Outcome::ThrottledBurst
            | Outcome::ThrottledSustained
            | Outcome::TenantShare
            | Outcome::ShardFull),
        ) => Ok(o.decision(wait)),
        _ => Err(Failure::Reply),
    }
}

/// What every failure decides: fail closed, no wait.
pub(super) const STORE_UNAVAILABLE: Decision = Decision::Unavailable {
    retry_after: None,
    cause: Cause::StoreUnavailable,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_fails_closed() {
        assert_eq!(script_decision(EXPIRED, 0), Err(Failure::Expired));
        assert_eq!(script_decision(0, 0), Ok(Decision::Admit));
        assert_eq!(script_decision(7, 0), Err(Failure::Reply));
    }
}
