//! The `redis_differential` check (feature `redis`): what `fuzz/fuzz_targets/redis_differential.rs`
//! runs on every input against one `redis-server` per process, and what
//! `tests/redis/differential.rs` replays over `fuzz/corpus/redis_differential/`.
//!
//! The same random sequence of admits, weighted admits (`n = 0`, mixed, larger than a bucket),
//! peeks, `admit_all` over several keys, reloads and real sleeps goes to a [`RedisLimiter`] and
//! to the embedded [`Limiter`], and every decision must be the same, waits to the microsecond.
//!
//! The Redis backend decides on the server's clock (`TIME` in the script), so the comparison is
//! made at the instant the server reports: each traced call returns it, and the embedded limiter
//! runs on a mock clock set to that instant just before it decides. The sequence of decisions
//! depends on how fast the machine is; the check does not: whatever instants the server reports,
//! both sides must agree at them. Where the public API reports no instant, the server's `TIME`
//! is read before (`a`) and after (`b`) the call:
//!
//! - a peek must equal the embedded peek at some microsecond of `[a, b]` (all are tried);
//! - `admit_all` decides its items one round trip each, at increasing instants in `[a, b]`, and
//!   gives the charges back on a refusal. Items decided later are admitted at least as readily
//!   as all at `a`, so an `Ok` at `a` means `Ok`. When no identity appears twice, each item's
//!   answer depends only on its own instant and gets more permissive with it, so when the
//!   embedded `admit_all` gives the same index and kind of answer at `a` and at `b`, Redis must
//!   give it too, with a wait between the two. (With an identity twice, a later item's wait
//!   shrinks with the time since the earlier item's charge: no bracket fixes it.) The charged
//!   identities' state then depends on the unknown instants, so after an admission the sequence
//!   moves to fresh identities (a new generation of names) on both sides.
//!
//! Periods are whole microseconds per token (token counts divide 1000, periods are whole
//! milliseconds) and capacity windows divide a second, with the embedded clock's zero on a whole
//! second of the server's clock: the resolution and the window grid are then the same on both
//! sides, and any difference is a divergence. An input ends early (nothing more compared) if the
//! server's clock steps back or a capacity window ends inside an `admit_all`'s bracket.
//!
//! The Redis side decides with the Redis function ([`Harness::start`]), with tollgate's Redis
//! module ([`Harness::start_module`]), or alternately with both on the same keys
//! ([`Harness::start_mixed`]: a fleet mixing nodes with and without the module).

use std::cell::Cell;
use std::time::Duration;

use tollgate::quanta::Clock;
use tollgate::redis::RedisLimiter;
use tollgate::{Decision, Limiter, Profile};

use crate::redis_server::RedisServer;

mod input;
mod names;
mod pair;

use super::bytes::Bytes;
use input::{yaml, Spec};
use names::Names;
use pair::{Pair, Stop};

/// One `redis-server` and a runtime to drive the Redis backend, shared by every input.
pub struct Harness {
    server: RedisServer,
    rt: tokio::runtime::Runtime,
    /// Decide with the module (`true`) or the function (`false`); one limiter of each,
    /// alternating call by call, when both.
    programs: &'static [bool],
}

impl Harness {
    /// Starts the server (killed when this process exits, even by a fuzz crash: see
    /// [`RedisServer::start_tied`]) and a single-threaded runtime; decisions by the function.
    pub fn start() -> Harness {
        Harness::with(RedisServer::start_tied(), &[false])
    }

    /// A server with tollgate's Redis module ([`crate::redis_module::server`], built on first
    /// use); decisions by the module.
    pub fn start_module() -> Harness {
        Harness::with(crate::redis_module::server(), &[true])
    }

    /// A server with the module; decisions alternately by the module and by the function, on
    /// the same keys.
    pub fn start_mixed() -> Harness {
        Harness::with(crate::redis_module::server(), &[true, false])
    }

    fn with(server: RedisServer, programs: &'static [bool]) -> Harness {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        Harness {
            server,
            rt,
            programs,
        }
    }
}

/// Capacity windows (ms) that divide a second, so that both sides' windows start together.
const WINDOWS: [u64; 7] = [20, 50, 100, 200, 250, 500, 1_000];
/// Costs for weighted admits: 0, small, around the token counts, and far too large.
const COSTS: [u32; 12] = [0, 1, 1, 2, 3, 4, 5, 8, 11, 26, 51, u32::MAX];
const KEYS: [&str; 4] = ["alice", "bob", "carol", "dave"];
/// At most this many operations per input, and this much real sleep in all.
const MAX_STEPS: usize = 160;
const MAX_SLEEP: Duration = Duration::from_millis(40);
/// The widest `[a, b]` bracket a peek is checked over, microseconds (a stalled machine skips).
const MAX_BRACKET_US: u64 = 50_000;

/// What one or more inputs compared, so that a replay can show it was not vacuous.
#[derive(Clone, Copy, Debug, Default)]
pub struct Compared {
    /// Single decisions (`admit`, `admit_n`) compared exactly, by outcome (`Outcome::index`).
    pub decisions: [u64; tollgate::Outcome::COUNT],
    /// Peeks found equal to the embedded peek at an instant of their bracket.
    pub peeks: u64,
    /// `admit_all` calls whose bracket fixed the answer (checked), and those it did not.
    pub admit_all_checked: u64,
    pub admit_all_open: u64,
    /// Reloads applied on both sides.
    pub reloads: u64,
    /// Reloads that changed a class's emission intervals and were compared across (the
    /// class's identities kept), and those that moved the class to fresh names (an identity
    /// of it had not been charged since the previous such reload).
    pub converted: u64,
    pub renamed: u64,
    /// Inputs that ended early (the server's clock stepped back, or a window ended inside an
    /// `admit_all`).
    pub stopped: u64,
}

/// The embedded limiter's decision with its wait rounded up to a whole microsecond, as Redis
/// keeps a debt converted by a reload (see the reload step).
fn in_micros(d: Decision) -> Decision {
    match d {
        Decision::Throttle {
            retry_after,
            bucket,
        } => Decision::Throttle {
            retry_after: Duration::from_micros(retry_after.as_nanos().div_ceil(1_000) as u64),
            bucket,
        },
        other => other,
    }
}

/// Runs one input against the harness's server; panics on a divergence.
pub fn check(h: &Harness, data: &[u8]) {
    check_counted(h, data, &mut Compared::default());
}

/// [`check`], adding what it compared to `seen`.
pub fn check_counted(h: &Harness, data: &[u8], seen: &mut Compared) {
    h.rt.block_on(run(h, data, seen));
}

async fn run(h: &Harness, data: &[u8], seen: &mut Compared) {
    let mut b = Bytes(data);
    let flags = b.u8();
    let mut specs = [b.spec(), b.spec()];
    let capacity = (flags & 1 == 1).then(|| {
        (
            WINDOWS[usize::from(b.u8()) % WINDOWS.len()],
            1 + u64::from(b.u8() % 40),
        )
    });
    let Ok(profile) = Profile::from_yaml(&yaml(&specs, capacity)) else {
        return;
    };
    h.server.cmd(&["FLUSHDB"]);
    let mut redis_profile = profile.clone();
    // Decisions, not timeouts, are under test: a loaded machine must not turn into a 503.
    redis_profile.store.timeout = tollgate::profile::Period::from_secs(10).unwrap();
    let mut limiters = Vec::new();
    for &module in h.programs {
        let redis = RedisLimiter::builder(&h.server.url(), redis_profile.clone())
            .key_secret(b"fuzz")
            .redis_module(module)
            .connect()
            .await
            .expect("connect to the harness's redis-server");
        let want = if module { "module" } else { "function" };
        assert_eq!(redis.store_program(), want, "the harness's decision path");
        limiters.push(redis);
    }
    let (clock, mock) = Clock::mock();
    let embedded = Limiter::builder(profile)
        .clock(clock)
        .key_secret(b"fuzz")
        .build()
        .expect("a 4096-slot table");
    let classes = [
        limiters[0].route_class("c0").unwrap(),
        limiters[0].route_class("c1").unwrap(),
    ];
    assert_eq!(classes[1], embedded.route_class("c1").unwrap());
    let mut p = Pair {
        limiters,
        turn: Cell::new(0),
        embedded,
        mock,
        port: h.server.port(),
        zero: 0,
        at: 0,
        classes,
        window: capacity.map(|(w, _)| w * 1_000),
    };
    p.zero = p.server_time() / 1_000_000 * 1_000_000;
    if steps(&mut p, &mut b, &mut specs, capacity, redis_profile, seen)
        .await
        .is_err()
    {
        seen.stopped += 1;
    }
}

async fn steps(
    p: &mut Pair,
    b: &mut Bytes<'_>,
    specs: &mut [Spec; 2],
    capacity: Option<(u64, u64)>,
    mut redis_profile: Profile,
    seen: &mut Compared,
) -> Result<(), Stop> {
    let mut slept = Duration::ZERO;
    let mut names = Names::default();
    for _ in 0..MAX_STEPS {
        if b.0.is_empty() {
            break;
        }
        let op = b.u8();
        let (k, c) = (usize::from(op >> 3) % KEYS.len(), usize::from(op >> 5) % 2);
        match op % 8 {
            // A real clock move: up to 25.5 ms, in steps of 100 us.
            0 => {
                let d = Duration::from_micros(u64::from(b.u8()) * 100);
                if slept + d <= MAX_SLEEP {
                    slept += d;
                    std::thread::sleep(d);
                }
            }
            1 | 2 => {
                let who = names.of(k, c);
                let (verdict, now) = p.redis().evaluate_traced(&p.key(&who, c)).await;
                let now = now.unwrap_or_else(|| panic!("no server time: {verdict:?}"));
                p.set(now)?;
                let want = in_micros(p.embedded.admit(&p.key(&who, c)));
                assert_eq!(
                    verdict.decision, want,
                    "admit {who} c{c} at server time {now} us (embedded {} us), specs {specs:?}, capacity {capacity:?}",
                    p.at
                );
                seen.decisions[want.outcome().index()] += 1;
                if want.is_admit() {
                    names.charged(&who, c);
                }
            }
            3 | 4 => {
                let n = COSTS[usize::from(b.u8()) % COSTS.len()];
                let who = names.of(k, c);
                let (verdict, now) = p.redis().evaluate_n_traced(&p.key(&who, c), n).await;
                match now {
                    Some(now) => p.set(now)?,
                    None => assert!(
                        matches!(verdict.decision, Decision::Exceeds { .. }),
                        "no server time for {verdict:?}"
                    ),
                }
                let want = in_micros(p.embedded.admit_n(&p.key(&who, c), n));
                assert_eq!(
                    verdict.decision, want,
                    "admit_n {who} c{c} n {n} at server time {now:?} us (embedded {} us), specs {specs:?}, capacity {capacity:?}",
                    p.at
                );
                seen.decisions[want.outcome().index()] += 1;
                if want.is_admit() && n > 0 {
                    names.charged(&who, c);
                }
            }
            5 => {
                let who = names.of(k, c);
                let a = p.server_time();
                let got = p.redis().peek(&p.key(&who, c)).await;
                let z = p.server_time();
                p.set(a)?;
                let (lo, hi) = (p.at, z.checked_sub(p.zero).ok_or(Stop)?);
                if hi < lo {
                    return Err(Stop);
                }
                if hi - lo <= MAX_BRACKET_US {
                    let matched = (lo..=hi).find(|&t| {
                        p.seek(t);
                        in_micros(p.embedded.peek(&p.key(&who, c))) == got
                    });
                    p.seek(lo);
                    let at_lo = p.embedded.peek(&p.key(&who, c));
                    p.seek(hi);
                    let at_hi = p.embedded.peek(&p.key(&who, c));
                    assert!(
                        matched.is_some(),
                        "peek {who} c{c}: redis {got:?} between server times {a} and {z} us; \
                         embedded {at_lo:?} at the start, {at_hi:?} at the end; specs {specs:?}, capacity {capacity:?}"
                    );
                    seen.peeks += 1;
                }
                p.set(z)?;
            }
            6 => {
                let count = 1 + usize::from(b.u8() % 4);
                let mut items = Vec::with_capacity(count);
                for _ in 0..count {
                    let x = b.u8();
                    let n = COSTS[usize::from(x >> 3) % COSTS.len()];
                    let class = usize::from(x >> 2) % 2;
                    items.push((names.of(usize::from(x) % 4, class), class, n));
                }
                let keys = |p: &Pair| {
                    items
                        .iter()
                        .map(|(w, c, n)| (p.key(w, *c), *n))
                        .collect::<Vec<_>>()
                };
                // With an identity twice, a later item's wait depends on how long after the
                // earlier one's charge it was decided: no bracket fixes a refusal then.
                let distinct = (0..items.len()).all(|i| {
                    (0..i).all(|j| (&items[i].0, items[i].1) != (&items[j].0, items[j].1))
                });
                let a = p.server_time();
                let got = p.redis().admit_all(&keys(p)).await;
                let z = p.server_time();
                if let Some(w) = p.window {
                    if a / w != z / w {
                        return Err(Stop);
                    }
                }
                p.set(a)?;
                let at_a = p.embedded.admit_all(&keys(p));
                p.set(z)?;
                let what = format!(
                    "admit_all {items:?} between server times {a} and {z} us: redis {got:?}, \
                     embedded {at_a:?} at the start; specs {specs:?}, capacity {capacity:?}"
                );
                let embedded_ok = match at_a {
                    Ok(()) => {
                        assert!(got.is_ok(), "{what}");
                        seen.admit_all_checked += 1;
                        true
                    }
                    Err(ea) => match p.embedded.admit_all(&keys(p)) {
                        Err(ez)
                            if distinct
                                && (ea.index, ea.decision.outcome())
                                    == (ez.index, ez.decision.outcome()) =>
                        {
                            let g = got.as_ref().err().unwrap_or_else(|| panic!("{what}"));
                            assert_eq!(
                                (g.index, g.decision.outcome()),
                                (ea.index, ea.decision.outcome()),
                                "{what}; embedded {ez:?} at the end"
                            );
                            let waits = (
                                g.decision.retry_after(),
                                in_micros(ea.decision).retry_after(),
                                in_micros(ez.decision).retry_after(),
                            );
                            assert!(
                                match waits {
                                    (None, None, None) => true,
                                    (Some(g), Some(a), Some(z)) => z <= g && g <= a,
                                    _ => false,
                                },
                                "{what}; embedded {ez:?} at the end"
                            );
                            seen.admit_all_checked += 1;
                            false
                        }
                        at_z => {
                            seen.admit_all_open += 1;
                            at_z.is_ok()
                        }
                    },
                };
                // The items before a refusal were charged, then given back: written all the same.
                if let Err(g) = &got {
                    for (w, class, n) in &items[..g.index] {
                        if *n > 0 {
                            names.charged(w, *class);
                        }
                    }
                }
                if embedded_ok || got.is_ok() {
                    // The charged state depends on instants the server did not report.
                    if capacity.is_some() && embedded_ok != got.is_ok() {
                        return Err(Stop);
                    }
                    names.next_generation();
                }
            }
            _ => {
                let new = b.spec();
                let mut next = *specs;
                next[c] = new;
                let Ok(profile) = Profile::from_yaml(&yaml(&next, capacity)) else {
                    continue;
                };
                let mut rp = profile.clone();
                rp.store = redis_profile.store;
                // Both sides take the new profile at the same instant (the embedded clock's).
                let at = p.zero + p.at;
                let r = p
                    .limiters
                    .iter()
                    .map(|l| l.reload_as_of(rp.clone(), at))
                    .reduce(|a, b| a.and(b))
                    .expect("a limiter");
                let e = p.embedded.reload(profile);
                assert_eq!(
                    r.is_ok(),
                    e.is_ok(),
                    "reload to {next:?}: redis {r:?}, embedded {e:?}"
                );
                if r.is_ok() {
                    seen.reloads += 1;
                    // Both carry a debt across a reload in tokens, converted as of the reload,
                    // and the first conversion of an identity must agree exactly (Redis rounds
                    // the converted debt up to a whole microsecond, the embedded limiter to a
                    // nanosecond: Redis's waits are the embedded ones rounded up, and every
                    // decision is the same, `in_micros`). Past that they may differ: the
                    // embedded limiter converts through every profile since the identity's
                    // last charge and Redis from that charge's intervals at once, and a second
                    // conversion scales the sub-microsecond difference. So at a reload that
                    // changes a class's intervals, if an identity of it (of the current names)
                    // was charged before the previous such reload, the class moves to fresh
                    // names.
                    let t = |(bt, bp, st, sp): Spec| (bp * 1_000_000 / bt, sp * 1_000_000 / st);
                    if t(specs[c]) != t(new) {
                        if names.intervals_changed(c) {
                            seen.renamed += 1;
                        } else {
                            seen.converted += 1;
                        }
                    }
                    *specs = next;
                    redis_profile = rp;
                }
            }
        }
    }
    Ok(())
}
