//! Where the Redis backend's state lives: the connection, the decision program, and the keys
//! it touches. One call is one `FCALL` of a Redis function (Redis 7 and later) or, on older
//! servers, one `EVALSHA` of the same code; see `admit.lua` for the arguments and number
//! ranges.

use crate::sync::unmodelled::{AtomicU64, Ordering};
use core::time::Duration;
use std::time::Instant;

use ::redis::{Cmd, ErrorKind, FromRedisValue, RedisError, Script};

use super::connection::Connection;
use crate::config::Config;
use crate::decision::{Cause, Decision, Outcome};
use crate::identity::{Digest, Key};
use crate::published::PublishedBucket;

/// The decision code; see its header for the arguments and the number ranges. It defines
/// `admit` and leaves registering or calling it to the two wrappers below.
const BODY: &str = include_str!("admit.lua");

/// Gives back one admitted call's charge (`admit_all`); see its header.
const REFUND: &str = include_str!("refund.lua");

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

/// How the code is called: Redis functions (the class constants are parsed once per server and
/// cached between calls, and no script cache lookup) or, where the server has no functions,
/// scripts by their SHA.
enum Program {
    Functions {
        /// `tollgate_<12 hex digits of the SHA-1 of both codes>`: one library per version of
        /// the code, so workers of two versions never replace each other's. Its functions are
        /// this name (a decision) and this name with `_refund`.
        name: String,
        refund: String,
        library: String,
    },
    Scripts {
        admit: Script,
        refund: Script,
    },
}

/// Which of the two programs a call runs.
#[derive(Clone, Copy)]
enum Entry {
    Admit,
    Refund,
}

impl Program {
    /// The function library made of `BODY` and `REFUND`.
    fn functions() -> Program {
        let hash = Script::new(&format!("{BODY}{REFUND}"))
            .get_hash()
            .to_owned();
        let name = format!("tollgate_{}", &hash[..12]);
        let refund = format!("{name}_refund");
        let library = format!(
            "#!lua name={name}\n{BODY}\n{REFUND}\nredis.register_function('{name}', admit)\n\
             redis.register_function('{refund}', refund)\n"
        );
        Program::Functions {
            name,
            refund,
            library,
        }
    }

    /// The scripts made of `BODY` and `REFUND`, for servers without functions.
    fn scripts() -> Program {
        Program::Scripts {
            admit: Script::new(&format!("{BODY}\nreturn admit(KEYS, ARGV)\n")),
            refund: Script::new(&format!("{REFUND}\nreturn refund(KEYS, ARGV)\n")),
        }
    }
}

/// `FUNCTION LOAD` (on a Cluster the client sends it to every primary; replicas get it by
/// replication): Ok if the library is (now) there, `Ok(false)` if the server has no functions
/// (before Redis 7).
async fn load_library(conn: &mut Connection, library: &str) -> Result<bool, RedisError> {
    let loaded: Result<String, RedisError> = ::redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(library)
        .query_async(conn)
        .await;
    match loaded {
        Ok(_) => Ok(true),
        // Some primaries had it already (on a Cluster the others loaded it in the same call).
        Err(e) if e.to_string().contains("already exists") => Ok(true),
        Err(e) if e.to_string().to_ascii_lowercase().contains("unknown") => Ok(false),
        Err(e) => Err(e),
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
    /// Loads the code on `conn`: as a function library, or as scripts where the server has no
    /// functions.
    /// The store's connection (shared: clones use the same sockets).
    pub(super) fn connection(&self) -> &Connection {
        &self.conn
    }

    pub(super) async fn new(
        mut conn: Connection,
        prefix: String,
        margin: Duration,
    ) -> Result<Store, RedisError> {
        let mut program = Program::functions();
        if let Program::Functions { library, .. } = &program {
            if !load_library(&mut conn, library).await? {
                program = Program::scripts();
            }
        }
        if let Program::Scripts { admit, refund } = &program {
            admit.prepare_invoke().load_async(&mut conn).await?;
            refund.prepare_invoke().load_async(&mut conn).await?;
        }
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
            program,
            prefix: prefix.into(),
            margin_ms: margin.as_millis() as u64,
            clock,
        })
    }

    /// The keys a decision for `key` touches, the tenant's field and its cap.
    fn place(&self, cfg: &Config, key: &Key<'_>, digest: Digest, tenant: Digest) -> Place {
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
        let place = self.place(cfg, key, digest, tenant);
        let (window, slots) = cfg.capacity.as_ref().map_or((0, 0), |c| c.window_micros());
        let mut args = vec![
            format!(
                "{bt} {btau} {st} {stau} {} {window} {slots} {}",
                self.margin_ms, place.cap
            ),
            n.to_string(),
            deadline.to_string(),
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
    ) -> Result<(Decision, u64, bool), Failure> {
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
        let reply = self.run::<ScriptReply>(Entry::Admit, &keys, &args);
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
        Ok((decision, now, near))
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
        let place = self.place(cfg, key, digest, tenant);
        let (window, _) = cfg.capacity.as_ref().map_or((0, 0), |c| c.window_micros());
        let end = if window > 0 {
            now - now % window + window
        } else {
            0
        };
        let n64 = u64::from(n);
        let mut args = vec![
            (bt * n64).to_string(),
            (st * n64).to_string(),
            end.to_string(),
            n.to_string(),
        ];
        args.extend(place.field);
        let reply = self.run::<u8>(Entry::Refund, &place.keys, &args);
        let _ = tokio::time::timeout(cfg.store_timeout, reply).await;
    }

    /// `FCALL` (loading the library again if the node that runs it lost it: a restart without
    /// persistence, `FUNCTION FLUSH`) or `EVALSHA` (the client loads the script on `NOSCRIPT`).
    async fn run<T: FromRedisValue>(
        &self,
        entry: Entry,
        keys: &[String],
        args: &[String],
    ) -> Result<T, RedisError> {
        let mut conn = self.conn.clone();
        match &self.program {
            Program::Functions {
                name,
                refund,
                library,
            } => {
                let name = match entry {
                    Entry::Admit => name,
                    Entry::Refund => refund,
                };
                let fcall = fcall(name, keys, args);
                match fcall.query_async(&mut conn).await {
                    // Not found: nothing ran, so calling again cannot charge twice.
                    Err(e) if e.to_string().contains("Function not found") => {
                        load_library(&mut conn, library).await?;
                        fcall.query_async(&mut conn).await
                    }
                    r => r,
                }
            }
            Program::Scripts { admit, refund } => {
                let script = match entry {
                    Entry::Admit => admit,
                    Entry::Refund => refund,
                };
                let mut inv = script.prepare_invoke();
                for k in keys {
                    inv.key(k);
                }
                for a in args {
                    inv.arg(a);
                }
                inv.invoke_async(&mut conn).await
            }
        }
    }

    /// The command one decision sends, as words (`FCALL name numkeys keys.. args..` or
    /// `EVALSHA sha numkeys ..`), for benchmarks that replay it with `redis-benchmark`.
    pub(super) fn command(
        &self,
        cfg: &Config,
        key: &Key<'_>,
        digest: Digest,
        tenant: Digest,
    ) -> Vec<String> {
        let (keys, args, _) = self.words(cfg, key, (digest, tenant), 1, 0);
        let (verb, target) = match &self.program {
            Program::Functions { name, .. } => ("FCALL", name.clone()),
            Program::Scripts { admit, .. } => ("EVALSHA", admit.get_hash().to_owned()),
        };
        let mut words = vec![verb.to_owned(), target, keys.len().to_string()];
        words.extend(keys);
        words.extend(args);
        words
    }
}

fn fcall(name: &str, keys: &[String], args: &[String]) -> Cmd {
    let mut c = ::redis::cmd("FCALL");
    c.arg(name).arg(keys.len()).arg(keys).arg(args);
    c
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
        assert_eq!(script_decision(EXPIRED, 0), Err(Failure::Expired));
        assert_eq!(script_decision(0, 0), Ok(Decision::Admit));
        assert_eq!(script_decision(7, 0), Err(Failure::Reply));
    }
}
