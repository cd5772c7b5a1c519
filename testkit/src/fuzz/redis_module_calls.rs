//! The `redis_module_calls` check (feature `redis`): hostile calls of tollgate's Redis module
//! (`tollgate.admit`, `tollgate.refund`, `COMMAND GETKEYS` of both) against a real
//! `redis-server` that loads it. What `fuzz/fuzz_targets/redis_module_calls.rs` runs on every
//! input, and what `tests/redis/module_calls.rs` replays over `fuzz/corpus/redis_module_calls/`
//! and over seeded random inputs.
//!
//! An input is a sequence of steps: plant a value at one of a few keys (strings of any bytes,
//! packed doubles that tollgate never writes — NaN, infinities, negative intervals —, hashes of
//! garbage counts, lists, sets, sorted sets, streams), or call a command with a random number of
//! arguments drawn from keys (equal ones, binary ones, one slot's), class constants (seven to
//! nine numbers, signs, 2^64 and past), numbers and bytes. After every call:
//!
//! - the server is alive (`PING`): a module must never take its server down;
//! - an error reply other than `WRONGTYPE` (which comes after a key is opened) changed nothing
//!   (`DEBUG DIGEST` before and after, with the active expiry cycle off);
//! - a decision's reply is three integers, and an identity the module charged holds the 48-byte
//!   value with six finite numbers.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{Connection, Value};

use super::bytes::Bytes;
use crate::redis_server::RedisServer;

/// A server loading the module, its log file (printed when it dies) and a connection.
pub struct Harness {
    server: RedisServer,
    log: PathBuf,
    conn: std::sync::Mutex<Connection>,
}

impl Harness {
    /// Starts a server with tollgate's module ([`crate::redis_module::path`], built on first
    /// use), `DEBUG` allowed from loopback and the active expiry cycle off, so that only a
    /// command changes the keyspace. The server is killed when the thread that started it
    /// exits ([`RedisServer::start_tied`]), as a fuzz process never drops it.
    pub fn start() -> Harness {
        let log = std::env::temp_dir().join(format!(
            "tollgate-module-calls-{}-{}.log",
            std::process::id(),
            crate::redis_server::free_port()
        ));
        let module = crate::redis_module::path();
        let server = RedisServer::start_tied_with(&[
            "--loadmodule",
            &module,
            "--enable-debug-command",
            "local",
            "--logfile",
            log.to_str().expect("a UTF-8 temporary directory"),
        ]);
        let client = redis::Client::open(server.url()).expect("the server's URL");
        let mut conn = client.get_connection().expect("a connection to the server");
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("a read timeout");
        let _: () = redis::cmd("DEBUG")
            .arg("SET-ACTIVE-EXPIRE")
            .arg(0)
            .query(&mut conn)
            .expect("DEBUG SET-ACTIVE-EXPIRE 0");
        Harness {
            server,
            log,
            conn: std::sync::Mutex::new(conn),
        }
    }

    /// Panics with the call that killed the server and the end of its log.
    fn died(&self, call: &[Vec<u8>], e: &redis::RedisError) -> ! {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        // Redis's crash report, from its start; else the end of the log.
        let from = lines
            .iter()
            .position(|l| l.contains("BUG REPORT START"))
            .unwrap_or(lines.len().saturating_sub(20));
        let report = &lines[from..lines.len().min(from + 30)];
        panic!(
            "redis-server (port {}) died on {} ({e}); its log:\n{}",
            self.server.port(),
            show(call),
            report.join("\n")
        );
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

/// What one or more inputs did, so that a replay can show it was not vacuous.
#[derive(Clone, Copy, Debug, Default)]
pub struct Called {
    /// Calls answered with a decision (`tollgate.admit`, three integers) or `0` (a refund).
    pub answered: u64,
    /// Decisions that admitted and charged (the identity's value checked).
    pub charged: u64,
    /// Calls refused with an error reply, the keyspace unchanged where checked.
    pub refused: u64,
    /// `WRONGTYPE` replies.
    pub wrong_type: u64,
    /// Key-position requests answered.
    pub getkeys: u64,
}

impl Called {
    /// Adds another count.
    pub fn add(&mut self, o: Called) {
        self.answered += o.answered;
        self.charged += o.charged;
        self.refused += o.refused;
        self.wrong_type += o.wrong_type;
        self.getkeys += o.getkeys;
    }
}

/// Runs one input (see the module doc); panics on a failed check.
pub fn check(h: &Harness, data: &[u8]) {
    check_counted(h, data, &mut Called::default());
}

/// [`check`], adding what the input did to `seen`.
pub fn check_counted(h: &Harness, data: &[u8], seen: &mut Called) {
    let mut b = Bytes(data);
    let mut conn = h.conn.lock().unwrap_or_else(|p| p.into_inner());
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut *conn)
        .unwrap_or_else(|e| h.died(&[b"FLUSHALL".to_vec()], &e));
    for _ in 0..MAX_STEPS {
        if b.0.is_empty() {
            break;
        }
        let step = b.u8() % 8;
        if step == 0 {
            for call in b.plant() {
                run(h, &mut conn, &call);
            }
            continue;
        }
        let call = match step {
            1 | 2 => b.call(b"tollgate.admit"),
            3 => b.call(b"tollgate.refund"),
            4 => {
                let name: &[u8] = if b.u8() % 2 == 0 {
                    b"tollgate.admit"
                } else {
                    b"tollgate.refund"
                };
                let mut c = vec![b"COMMAND".to_vec(), b"GETKEYS".to_vec()];
                c.extend(b.call(name));
                c
            }
            _ => b.well_formed(),
        };
        decide(h, &mut conn, &call, seen);
    }
}

/// At most this many steps per input.
const MAX_STEPS: usize = 64;

/// Keys: equal ones come from drawing twice; one hash slot (`{t}`); binary; empty; long.
fn key(i: u8) -> Vec<u8> {
    match i % 7 {
        0 => b"k".to_vec(),
        1 => b"{t}x".to_vec(),
        2 => b"{t}y".to_vec(),
        3 => b"\x00\xff\r\n{t}".to_vec(),
        4 => Vec::new(),
        5 => [b"{t}".as_slice(), &[b'k'; 600]].concat(),
        _ => b"tollgate:{0}:i:00ff".to_vec(),
    }
}

/// Numbers as arguments: edges of `i64`, `u64` and doubles, and things that are not numbers.
const NUMBERS: [&str; 24] = [
    "0",
    "1",
    "-1",
    "2",
    "10",
    "1000",
    "1000000",
    "1800000000000000",
    "9007199254740992",
    "9007199254740993",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "18446744073709551616",
    "99999999999999999999999999999",
    "1e5",
    "",
    " 1",
    "1 ",
    "+1",
    "0x10",
    "nan",
    "inf",
    "-0",
];

/// Numbers inside class constants: zero intervals, a second, a year, 2^53, 2^64 - 1, past it.
const CLASS_NUMBERS: [&str; 12] = [
    "0",
    "1",
    "100",
    "1000",
    "10000",
    "1000000",
    "3600000000",
    "31622400000000",
    "9007199254740992",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999",
];

/// Doubles planted in packed values: what tollgate never writes, and edges of what it does.
const DOUBLES: [f64; 14] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    -1.0,
    1.0,
    1e4,
    9.007_199_254_740_992e15,
    1e300,
    -1e300,
    f64::MIN_POSITIVE,
    1.8e15,
    1.8e12,
];

/// The server's clock in microseconds, roughly (planted TATs near it reach the arithmetic).
fn now_us() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_micros() as f64)
}

impl Bytes<'_> {
    fn number(&mut self) -> Vec<u8> {
        NUMBERS[usize::from(self.u8()) % NUMBERS.len()]
            .as_bytes()
            .to_vec()
    }

    fn double(&mut self) -> f64 {
        let i = self.u8();
        match i % 4 {
            // Near now, ahead or behind by up to ~65 s.
            0 => now_us() + f64::from(self.u16()) * 1000.0 - 32_768_000.0,
            _ => DOUBLES[usize::from(i / 4) % DOUBLES.len()],
        }
    }

    /// Class constants: usually eight numbers, sometimes seven or nine, a sign, extra spaces.
    fn class(&mut self) -> Vec<u8> {
        let shape = self.u8();
        let count = match shape % 8 {
            0 => 7,
            1 => 9,
            _ => 8,
        };
        let mut words: Vec<String> = (0..count)
            .map(|_| CLASS_NUMBERS[usize::from(self.u8()) % CLASS_NUMBERS.len()].to_owned())
            .collect();
        if (shape / 8).is_multiple_of(8) {
            words[0] = format!("-{}", words[0]);
        }
        let sep = if shape / 64 == 0 { "  " } else { " " };
        words.join(sep).into_bytes()
    }

    /// Sensible class constants: burst and sustained of whole microseconds, capacity or none.
    fn sensible_class(&mut self) -> Vec<u8> {
        let bt = 1 + u64::from(self.u16());
        let bn = 1 + u64::from(self.u8() % 16);
        let st = bt * (1 + u64::from(self.u8() % 8));
        let sn = 1 + u64::from(self.u8());
        let window = [0, 0, 1_000, 1_000_000][usize::from(self.u8() % 4)];
        let slots = u64::from(self.u8());
        let cap = u64::from(self.u8());
        format!(
            "{bt} {} {st} {} 100 {window} {slots} {cap}",
            bt * bn,
            st * sn
        )
        .into_bytes()
    }

    /// One argument of any kind.
    fn argument(&mut self) -> Vec<u8> {
        match self.u8() % 6 {
            0 | 1 => key(self.u8()),
            2 => self.class(),
            3 | 4 => self.number(),
            _ => {
                let n = usize::from(self.u8() % 32);
                self.take(n).to_vec()
            }
        }
    }

    /// `name` with 0 to 10 arguments of any kind.
    fn call(&mut self, name: &[u8]) -> Vec<Vec<u8>> {
        let n = self.u8() % 11;
        let mut c = vec![name.to_vec()];
        c.extend((0..n).map(|_| self.argument()));
        c
    }

    /// A call of the right arity with sensible constants, so that the arithmetic and the writes
    /// are reached on planted values: admit or refund, with or without capacity.
    fn well_formed(&mut self) -> Vec<Vec<u8>> {
        let shape = self.u8();
        let capacity = shape.is_multiple_of(2);
        let mut c = if (shape / 2).is_multiple_of(4) {
            let mut c = vec![b"tollgate.refund".to_vec(), key(self.u8())];
            if capacity {
                c.push(key(self.u8()));
            }
            for _ in 0..4 {
                c.push(self.number());
            }
            c
        } else {
            let mut c = vec![b"tollgate.admit".to_vec(), key(self.u8())];
            if capacity {
                c.push(key(self.u8()));
            }
            c.push(self.sensible_class());
            c.push([b"1".as_slice(), b"2", b"0", b"100"][usize::from(self.u8() % 4)].to_vec());
            c.push(b"0".to_vec());
            c.push(self.number());
            c
        };
        if capacity {
            let field: &[u8] = match self.u8() % 5 {
                0 => b"e",
                1 => b"s",
                2 => b"",
                _ => b"t1",
            };
            c.push(field.to_vec());
        }
        c
    }

    /// The commands that plant a value at one key, after deleting it; expiries far ahead
    /// (nothing expires during a run).
    fn plant(&mut self) -> Vec<Vec<Vec<u8>>> {
        let k = key(self.u8());
        let mut calls = vec![vec![b"DEL".to_vec(), k.clone()]];
        let v = |s: &str| s.as_bytes().to_vec();
        let set = match self.u8() % 10 {
            0 => {
                let n = usize::from(self.u8() % 64);
                vec![v("SET"), k.clone(), self.take(n).to_vec()]
            }
            1 | 2 => {
                let d: Vec<u8> = (0..3).flat_map(|_| self.double().to_le_bytes()).collect();
                vec![v("SET"), k.clone(), d]
            }
            3..=5 => {
                let d: Vec<u8> = (0..6).flat_map(|_| self.double().to_le_bytes()).collect();
                vec![v("SET"), k.clone(), d]
            }
            6 => {
                let (a, b) = (self.number(), self.number());
                vec![v("SET"), k.clone(), [a, b":".to_vec(), b].concat()]
            }
            7 => vec![
                v("HSET"),
                k.clone(),
                v("e"),
                self.number(),
                v("s"),
                self.number(),
                v("t1"),
                self.number(),
            ],
            8 => vec![v("RPUSH"), k.clone(), self.number()],
            _ => match self.u8() % 3 {
                0 => vec![v("SADD"), k.clone(), v("m")],
                1 => vec![v("ZADD"), k.clone(), v("1"), v("m")],
                _ => vec![v("XADD"), k.clone(), v("*"), v("f"), v("v")],
            },
        };
        calls.push(set);
        if self.u8().is_multiple_of(4) {
            calls.push(vec![v("PEXPIRE"), k, v("600000")]);
        }
        calls
    }
}

fn command(call: &[Vec<u8>]) -> redis::Cmd {
    let mut c = redis::cmd(std::str::from_utf8(&call[0]).expect("command names are ASCII"));
    for a in &call[1..] {
        c.arg(a.as_slice());
    }
    c
}

/// A call that plants a value: it must succeed (it is Redis's own command on keys it names).
fn run(h: &Harness, conn: &mut Connection, call: &[Vec<u8>]) {
    if let Err(e) = command(call).query::<Value>(conn) {
        if e.is_io_error() || e.is_connection_dropped() {
            h.died(call, &e);
        }
        panic!("setting up with {} failed: {e}", show(call));
    }
}

fn digest(h: &Harness, conn: &mut Connection) -> String {
    redis::cmd("DEBUG")
        .arg("DIGEST")
        .query(conn)
        .unwrap_or_else(|e| h.died(&[b"DEBUG".to_vec(), b"DIGEST".to_vec()], &e))
}

fn alive(h: &Harness, conn: &mut Connection, call: &[Vec<u8>]) {
    match redis::cmd("PING").query::<String>(conn) {
        Ok(p) if p == "PONG" => {}
        Ok(other) => panic!("PING after {} answered {other:?}", show(call)),
        Err(e) => h.died(call, &e),
    }
}

/// One call of the module's commands, and the checks after it.
fn decide(h: &Harness, conn: &mut Connection, call: &[Vec<u8>], seen: &mut Called) {
    let before = digest(h, conn);
    let reply = command(call).query::<Value>(conn);
    alive(h, conn, call);
    let getkeys = call[0] == b"COMMAND";
    match reply {
        Err(e) if e.is_io_error() || e.is_connection_dropped() => h.died(call, &e),
        Err(e) if e.code() == Some("WRONGTYPE") => seen.wrong_type += 1,
        Err(e) => {
            let after = digest(h, conn);
            assert_eq!(
                before,
                after,
                "{} was refused ({e}) but changed the keyspace",
                show(call)
            );
            seen.refused += 1;
        }
        Ok(_) if getkeys => seen.getkeys += 1,
        Ok(Value::Int(0)) if call[0] == b"tollgate.refund" => seen.answered += 1,
        Ok(v) if call[0] == b"tollgate.admit" => {
            let [outcome, _, _] = triple(&v, call);
            seen.answered += 1;
            // Admitted and charged (a cost of 0 or less only looks): the identity's value.
            let n = &call[if call.len() == 8 { 4 } else { 3 }];
            let charging =
                std::str::from_utf8(n).is_ok_and(|n| n.parse::<i64>().is_ok_and(|n| n > 0));
            if outcome == 0 && charging {
                let id: Vec<u8> = redis::cmd("GET")
                    .arg(call[1].as_slice())
                    .query(conn)
                    .expect("GET of the identity");
                assert_eq!(id.len(), 48, "{} stored {id:?}", show(call));
                let finite = id
                    .chunks(8)
                    .all(|c| f64::from_le_bytes(c.try_into().unwrap()).is_finite());
                assert!(finite, "{} stored a number that is not finite", show(call));
                seen.charged += 1;
            }
        }
        Ok(v) => panic!("{} answered {v:?}", show(call)),
    }
}

/// `[outcome, wait, now]`, or a panic naming the call.
fn triple(v: &Value, call: &[Vec<u8>]) -> [i64; 3] {
    let ints: Option<Vec<i64>> = match v {
        Value::Array(a) if a.len() == 3 => a
            .iter()
            .map(|x| match x {
                Value::Int(i) => Some(*i),
                _ => None,
            })
            .collect(),
        _ => None,
    };
    match ints {
        Some(i) => [i[0], i[1], i[2]],
        None => panic!("{} answered {v:?}, not three integers", show(call)),
    }
}

/// A call as text, bytes escaped, long arguments shortened.
fn show(call: &[Vec<u8>]) -> String {
    call.iter()
        .map(|a| {
            let s = String::from_utf8_lossy(&a[..a.len().min(40)]);
            let more = if a.len() > 40 { "…" } else { "" };
            format!("{:?}", format!("{s}{more}"))
        })
        .collect::<Vec<_>>()
        .join(" ")
}
