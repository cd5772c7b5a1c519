//! tollgate's Redis module (`redis-module/`: `tollgate.admit`, `tollgate.refund`) against the
//! Redis function on real servers: the same bytes written and the same replies, bad input
//! refused with nothing written, replicas and the AOF given the writes (never the command), and
//! a worker falling back to the function when a node loses the module. Decisions against the
//! embedded model: the corpus replays in `differential.rs`. The harness builds the module
//! (`cargo build --release --manifest-path redis-module/Cargo.toml`) unless
//! `TOLLGATE_REDIS_MODULE` names it.

use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{cmd, Value};
use tollgate::redis::RedisLimiter;
use tollgate::{Decision, Key, Profile};
use tollgate_testkit::redis_module;
use tollgate_testkit::redis_server::{cmd_at, RedisServer};

const ADMIT: &str = include_str!("../../src/redis/admit.lua");
const REFUND: &str = include_str!("../../src/redis/refund.lua");

/// The function library as tollgate registers it, under short names.
fn library() -> String {
    format!(
        "#!lua name=t\n{ADMIT}\n{REFUND}\nredis.register_function('a', admit)\n\
         redis.register_function('r', refund)\n"
    )
}

async fn conn(server: &RedisServer) -> MultiplexedConnection {
    let client = ::redis::Client::open(server.url()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// A server with the module and the function library loaded, and a connection to it.
async fn both() -> (RedisServer, MultiplexedConnection) {
    let server = redis_module::server();
    let mut c = conn(&server).await;
    let _: String = cmd("FUNCTION")
        .arg("LOAD")
        .arg(library())
        .query_async(&mut c)
        .await
        .unwrap();
    (server, c)
}

async fn now_us(c: &mut MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = cmd("TIME").query_async(c).await.unwrap();
    s * 1_000_000 + us
}

/// A stored value, as `struct.pack('<d..')` writes it: the current six doubles (both TATs, the
/// expiry, the intervals they are counted in, the last charge) or the previous version's three.
fn packed<const N: usize>(v: [f64; N]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `SET id value` (the expiry left as the server has it: none for a new key).
async fn set(c: &mut MultiplexedConnection, id: &str, value: &[u8]) {
    let _: () = cmd("SET").arg(id).arg(value).query_async(c).await.unwrap();
}

/// `GET id`.
async fn get(c: &mut MultiplexedConnection, id: &str) -> Vec<u8> {
    cmd("GET").arg(id).query_async(c).await.unwrap()
}

fn doubles(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks(8)
        .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// Runs one decision by the module (`tollgate.admit keys.. args..`) or the function
/// (`FCALL a numkeys keys.. args..`).
async fn decide(
    c: &mut MultiplexedConnection,
    module: bool,
    keys: &[&str],
    args: &[&str],
) -> ::redis::RedisResult<Value> {
    call(c, module, ("tollgate.admit", "a"), keys, args).await
}

/// Runs one refund by the module (`tollgate.refund ..`) or the function (`FCALL r ..`).
async fn refund(
    c: &mut MultiplexedConnection,
    module: bool,
    keys: &[&str],
    args: &[&str],
) -> ::redis::RedisResult<Value> {
    call(c, module, ("tollgate.refund", "r"), keys, args).await
}

/// The module's `command`, or the function library's entry of the same step.
async fn call(
    c: &mut MultiplexedConnection,
    module: bool,
    (command, function): (&str, &str),
    keys: &[&str],
    args: &[&str],
) -> ::redis::RedisResult<Value> {
    let mut q = if module {
        cmd(command)
    } else {
        let mut q = cmd("FCALL");
        q.arg(function).arg(keys.len());
        q
    };
    q.arg(keys).arg(args).query_async(c).await
}

/// `[outcome, wait, now]`.
fn triple(v: &Value) -> [i64; 3] {
    match v {
        Value::Array(a) if a.len() == 3 => {
            let i = |x: &Value| match x {
                Value::Int(i) => *i,
                other => panic!("not an integer: {other:?}"),
            };
            [i(&a[0]), i(&a[1]), i(&a[2])]
        }
        other => panic!("not the decision's reply: {other:?}"),
    }
}

/// From the same state (TATs in the future, so that nothing depends on the instant but the
/// reply's `now`), the module and the function write the same bytes, the same capacity hash
/// and give the same reply (`wait + now` is the same instant on both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_and_function_write_the_same_bytes_and_reply_alike() {
    let (_server, mut c) = both().await;
    // burst 100/10s (t 100 ms, tau 10 s), sustained 1000/1h; capacity window 10 s, 50 slots,
    // the tenant's cap 7.
    let class = "100000 10000000 3600000 3600000000 100 10000000 50 7";
    let now = now_us(&mut c).await as f64;
    // 500 ms of burst debt and 2 s of sustained debt; an expiry far ahead (KEEPTTL path).
    let state = packed([now + 500_000.0, now + 2_000_000.0, 9e12]);
    for (module, id, hash) in [(true, "m:{1}:i", "m:{1}:c"), (false, "f:{1}:i", "f:{1}:c")] {
        let _: () = cmd("SET")
            .arg(id)
            .arg(&state)
            .arg("PX")
            .arg(600_000)
            .query_async(&mut c)
            .await
            .unwrap();
        let mut replies = Vec::new();
        // Weighted 3, a peek, then 4 (the tenant's cap of 7 is then used up), then 1: refused
        // by the tenant's share.
        for n in ["3", "0", "4", "1"] {
            let r = decide(&mut c, module, &[id, hash], &[class, n, "0", "0", "tenant"]).await;
            replies.push(triple(&r.unwrap()));
        }
        let bytes = get(&mut c, id).await;
        // The last charge's instant: the third call's.
        let charged = replies[2][2] as f64;
        let mut fields: Vec<(String, String)> =
            cmd("HGETALL").arg(hash).query_async(&mut c).await.unwrap();
        fields.sort();
        let ttl: i64 = cmd("PTTL").arg(hash).query_async(&mut c).await.unwrap();
        assert!(ttl > 0, "the capacity hash expires");
        assert_eq!(
            bytes,
            packed([
                now + 500_000.0 + 7.0 * 100_000.0,
                now + 2_000_000.0 + 7.0 * 3_600_000.0,
                9e12,
                100_000.0,
                3_600_000.0,
                charged
            ]),
            "module {module}: both TATs moved by 7 tokens, the expiry kept, the intervals and \
             the instant of the last charge written (the previous version's 24 bytes read)"
        );
        let outcomes: Vec<i64> = replies.iter().map(|r| r[0]).collect();
        assert_eq!(outcomes, [0, 0, 0, 3], "module {module}: {replies:?}");
        let instants: Vec<i64> = replies.iter().map(|r| r[1] + r[2]).collect();
        let want = [
            now as i64 + 800_000, // burst debt after 3 more tokens, as an instant
            now as i64 + 900_000, // a peek is checked as for one token
            now as i64 + 1_200_000,
        ];
        assert_eq!(&instants[..3], &want, "module {module}");
        let window_end = (now as i64 / 10_000_000 + 1) * 10_000_000;
        // (A window boundary between the calls would fail the next assertion loudly.)
        assert_eq!(
            instants[3], window_end,
            "a share refusal waits for the window's end"
        );
        assert_eq!(
            fields,
            [
                ("e".to_owned(), window_end.to_string()),
                ("s".to_owned(), "7".to_owned()),
                ("tenant".to_owned(), "7".to_owned())
            ],
            "module {module}"
        );
        // Refund 2 tokens' worth and 2 slots.
        let wend = window_end.to_string();
        let (bc, sc) = ((2 * 100_000).to_string(), (2 * 3_600_000).to_string());
        let args = [bc.as_str(), sc.as_str(), wend.as_str(), "2", "tenant"];
        let r: i64 = if module {
            cmd("tollgate.refund")
                .arg(&[id, hash])
                .arg(&args)
                .query_async(&mut c)
                .await
        } else {
            cmd("FCALL")
                .arg("r")
                .arg(2)
                .arg(&[id, hash])
                .arg(&args)
                .query_async(&mut c)
                .await
        }
        .unwrap();
        assert_eq!(r, 0);
        let bytes = get(&mut c, id).await;
        assert_eq!(
            bytes,
            packed([
                now + 500_000.0 + 5.0 * 100_000.0,
                now + 2_000_000.0 + 5.0 * 3_600_000.0,
                9e12,
                100_000.0,
                3_600_000.0,
                charged
            ]),
            "module {module}: refunded"
        );
        let counts: Vec<Option<String>> = cmd("HMGET")
            .arg(hash)
            .arg(&["s", "tenant"])
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(counts, [Some("5".to_owned()), Some("5".to_owned())]);
        let ttl: i64 = cmd("PTTL").arg(id).query_async(&mut c).await.unwrap();
        assert!(
            ttl > 500_000,
            "module {module}: the identity's expiry kept ({ttl} ms)"
        );
    }
}

/// A value counted in other emission intervals (a reload): the module and the function
/// convert it alike, as of the later of the reload instant (`ARGV[4]`) and the value's last
/// charge, and write the same bytes; a refusal converts without writing; a refund gives back
/// tokens of the intervals the value is counted in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_and_function_convert_a_reloaded_value_alike() {
    let (_server, mut c) = both().await;
    let now = now_us(&mut c).await as f64;
    // Charged 2 s ago under burst 100/1s (10 ms), sustained 1000/1h (3.6 s), owing 1 s and
    // 100 s from then; now the class is burst 100/10s (100 ms) and sustained 1000/2h (7.2 s),
    // reloaded 1 s ago. Debt at the reload: 0 s of burst (full), 99 s of sustained: 27.5
    // tokens, owed as 27.5 * 7.2 s = 198 s.
    let (s, r) = (now - 2e6, now - 1e6);
    let state = packed([s + 1e6, s + 1e8, 9e12, 10_000.0, 3_600_000.0, s]);
    let class = "100000 10000000 7200000 7200000000 100 0 0 0";
    let reloaded = (r as u64).to_string();
    let mut written = Vec::new();
    for (module, id) in [(true, "m:{1}:i"), (false, "f:{1}:i")] {
        set(&mut c, id, &state).await;
        let r1 = triple(
            &decide(&mut c, module, &[id], &[class, "1", "0", &reloaded])
                .await
                .unwrap(),
        );
        assert_eq!(r1[0], 0, "module {module}: admitted");
        let bytes = get(&mut c, id).await;
        let v = doubles(&bytes);
        assert_eq!(
            v[..5],
            [
                r1[2] as f64 + 100_000.0,
                r + 198e6 + 7.2e6,
                9e12,
                100_000.0,
                7_200_000.0
            ],
            "module {module}: converted as of the reload, then charged"
        );
        assert_eq!(v[5], r1[2] as f64, "module {module}: the charge's instant");
        // (The burst was full at the reload: its TAT is this call's instant plus a token.)
        written.push(v[1..5].to_vec());
        // A reload instant before the last charge converts as of the charge instead: the
        // sustained bucket owed 100 s then, 27.78 tokens, ceil(100 s * 2) = 200 s now.
        set(&mut c, id, &state).await;
        let r2 = triple(
            &decide(&mut c, module, &[id], &[class, "1", "0", "0"])
                .await
                .unwrap(),
        );
        let v = doubles(&get(&mut c, id).await);
        assert_eq!((r2[0], v[1]), (0, s + 200e6 + 7.2e6), "module {module}");
        // A refusal converts and writes nothing: the state again, a cost of 100 burst tokens
        // (the burst owed 100 ms * 100 as of the charge, 10 s: none left).
        set(&mut c, id, &state).await;
        let r3 = triple(
            &decide(&mut c, module, &[id], &[class, "100", "0", "0"])
                .await
                .unwrap(),
        );
        assert_eq!(
            (r3[0], r3[1] + r3[2]),
            (1, (s + 1e7) as i64),
            "module {module}: refused until the converted debt is paid"
        );
        let after = get(&mut c, id).await;
        assert_eq!(after, state, "module {module}: a refusal writes nothing");
        // A refund of one token gives back 10 ms and 3.6 s, the stored intervals', not the
        // costs the worker sent (its current intervals').
        let args = ["100000", "7200000", "0", "1"];
        let _: i64 = if module {
            cmd("tollgate.refund")
                .arg(id)
                .arg(&args)
                .query_async(&mut c)
                .await
        } else {
            cmd("FCALL")
                .arg("r")
                .arg(1)
                .arg(id)
                .arg(&args)
                .query_async(&mut c)
                .await
        }
        .unwrap();
        let back = doubles(&get(&mut c, id).await);
        assert_eq!(
            back,
            [
                s + 1e6 - 10_000.0,
                s + 1e8 - 3_600_000.0,
                9e12,
                10_000.0,
                3_600_000.0,
                s
            ],
            "module {module}: refunded in the stored intervals"
        );
    }
    assert_eq!(written[0], written[1], "the same conversion by both");
}

/// A new identity: the expiry is set (`PXAT`) to the same instant the function sets, within
/// the microseconds between the two calls; the previous version's text is read and replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_and_previous_version_keys() {
    let (_server, mut c) = both().await;
    let class = "100000 1000000 3600000 3600000000 100 0 0 0";
    for module in [true, false] {
        let id = if module { "m:{1}:i" } else { "f:{1}:i" };
        let r = triple(
            &decide(&mut c, module, &[id], &[class, "1", "0", "0"])
                .await
                .unwrap(),
        );
        let now = r[2];
        assert_eq!(r[..2], [0, 100_000], "module {module}");
        let bytes = get(&mut c, id).await;
        assert_eq!(bytes.len(), 48, "module {module}");
        let d = |i: usize| f64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!([d(3), d(4), d(5)], [100_000.0, 3_600_000.0, now as f64]);
        // need = sustained TAT in ms + 1; plus the margin and an eighth of 3.6 s.
        let need = (now + 3_600_000) / 1000 + 1;
        let exp = need + 100 + 450;
        assert_eq!(
            [d(0), d(1), d(2)],
            [(now + 100_000) as f64, (now + 3_600_000) as f64, exp as f64]
        );
        let at: i64 = cmd("PEXPIRETIME")
            .arg(id)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(at, exp, "module {module}: PXAT the stored expiry");
        // The previous version's "<burst>:<sustained>" text.
        let old = format!("{}:{}", now + 5_000_000, now);
        set(&mut c, id, old.as_bytes()).await;
        let r = triple(
            &decide(&mut c, module, &[id], &[class, "1", "0", "0"])
                .await
                .unwrap(),
        );
        assert_eq!(r[0], 1, "module {module}: 5 s of burst debt refuses");
        assert_eq!(r[1] + r[2], now + 5_000_000 + 100_000 - 1_000_000);
    }
}

/// A stored value with numbers tollgate never writes (NaN, an infinity, an interval of 0) reads
/// as absent to both: a full bucket, charged and written back as a fresh value, never NaN TATs
/// that would admit everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_tollgate_never_writes_read_as_absent() {
    let (_server, mut c) = both().await;
    let class = "100000 1000000 3600000 3600000000 100 0 0 0";
    let now = now_us(&mut c).await as f64;
    let bad: [Vec<u8>; 4] = [
        packed([f64::NAN, f64::NAN, f64::NAN, f64::NAN, f64::NAN, f64::NAN]),
        packed([now + 9e5, f64::INFINITY, 9e12, 1e5, 3.6e6, now]),
        packed([now + 9e5, now, 9e12, 0.0, 3.6e6, now]),
        packed([f64::NAN, now, 9e12]),
    ];
    for value in &bad {
        for module in [true, false] {
            let id = if module { "m:{1}:i" } else { "f:{1}:i" };
            set(&mut c, id, value).await;
            let r = decide(&mut c, module, &[id], &[class, "1", "0", "0"]).await;
            let r = triple(&r.unwrap());
            assert_eq!(r[..2], [0, 100_000], "module {module}: a full bucket");
            let stored = doubles(&get(&mut c, id).await);
            assert!(stored.iter().all(|x| x.is_finite()), "{stored:?}");
            assert_eq!(stored[0], (r[2] + 100_000) as f64);
            // A refund to such a value gives nothing back and writes nothing.
            set(&mut c, id, value).await;
            let r = refund(&mut c, module, &[id], &["1", "1", "0", "1"]).await;
            assert_eq!(r.unwrap(), Value::Int(0));
            assert_eq!(&get(&mut c, id).await, value, "module {module}");
        }
    }
}

/// Bad input: an error reply, and nothing written (the keys set up are unchanged, no key is
/// added). Where the function errors too, both do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_an_error_and_writes_nothing() {
    let (server, mut c) = both().await;
    let good = "100000 1000000 3600000 3600000000 100 0 0 0";
    let cap = "100000 1000000 3600000 3600000000 100 1000000 10 5";
    let _: () = cmd("HSET")
        .arg("h:{1}")
        .arg("x")
        .arg("1")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = cmd("SET")
        .arg("s:{1}")
        .arg("v")
        .query_async(&mut c)
        .await
        .unwrap();
    let before = server.cmd(&["DEBUG", "DIGEST"]);
    let module_only: &[&[&str]] = &[
        &["tollgate.admit"],
        &["tollgate.admit", "i:{1}"],
        &["tollgate.admit", "i:{1}", good, "1"],
        &["tollgate.admit", "i:{1}", good, "1", "0"],
        &["tollgate.admit", "i:{1}", good, "1", "0", "0", "extra"],
        &["tollgate.admit", "i:{1}", good, "1.5", "0", "0"],
        &["tollgate.admit", "i:{1}", good, "1", "soon", "0"],
        &["tollgate.admit", "i:{1}", good, "1", "0", "later"],
        &[
            "tollgate.admit",
            "i:{1}",
            good,
            "99999999999999999999",
            "0",
            "0",
        ],
        // Shared capacity without its key and field.
        &["tollgate.admit", "i:{1}", cap, "1", "0", "0"],
        &["tollgate.refund", "i:{1}", "1", "2", "3"],
        &["tollgate.refund", "i:{1}", "1", "x", "0", "1"],
        &["tollgate.refund", "i:{1}", "1", "2", "1000000", "1"],
        &[
            "tollgate.refund",
            "i:{1}",
            "c:{1}",
            "1",
            "2",
            "3",
            "one",
            "t",
        ],
    ];
    for args in module_only {
        let r = cmd_at(server.port(), args);
        assert!(r.is_err(), "{args:?}: {r:?}");
    }
    // Both refuse these.
    let both: &[(&[&str], &[&str])] = &[
        (&["i:{1}"], &["1 2 3", "1", "0", "0"]),
        (&["i:{1}"], &[good, "x", "0", "0"]),
        (&["i:{1}"], &[good, "1", "x", "0"]),
        (&["h:{1}"], &[good, "1", "0", "0"]),
        (&["i:{1}", "s:{1}"], &[cap, "1", "0", "0", "t"]),
    ];
    // One key as both the identity and the capacity hash (it aborted redis-server: the
    // module's two handles each created it), and a tenant's field that is the window's own.
    let aliased: &[(&[&str], &[&str])] = &[
        (&["same", "same"], &[cap, "1", "0", "0", "f"]),
        (&["{t}x", "{t}x"], &[cap, "1", "0", "0", "f"]),
        (&["{t}x", "{t}x"], &[good, "1", "0", "0", "f"]),
        (&["i:{1}", "c:{1}"], &[cap, "1", "0", "0", "e"]),
        (&["i:{1}", "c:{1}"], &[cap, "1", "0", "0", "s"]),
    ];
    for (keys, args) in both.iter().chain(aliased) {
        let m = decide(&mut c, true, keys, args).await;
        let f = decide(&mut c, false, keys, args).await;
        assert!(
            m.is_err() && f.is_err(),
            "{keys:?} {args:?}: module {m:?}, function {f:?}"
        );
        if args[0] == "1 2 3" || keys.len() == 2 && args.len() == 5 && args[4] != "t" {
            assert_eq!(
                m.unwrap_err().to_string(),
                f.unwrap_err().to_string(),
                "{keys:?} {args:?}: the same error text"
            );
        }
    }
    for (keys, args) in [
        (["same", "same"], ["1", "1", "1000000", "1", "f"]),
        (["i:{1}", "c:{1}"], ["1", "1", "1000000", "1", "s"]),
    ] {
        let m = refund(&mut c, true, &keys, &args).await;
        let f = refund(&mut c, false, &keys, &args).await;
        assert_eq!(
            m.unwrap_err().to_string(),
            f.unwrap_err().to_string(),
            "{keys:?} {args:?}"
        );
    }
    assert_eq!(server.cmd(&["PING"]), "PONG", "the server is alive");
    assert_eq!(server.cmd(&["DEBUG", "DIGEST"]), before, "nothing written");
    assert_eq!(server.cmd(&["DBSIZE"]), "2");
}

/// A replica (without the module) and the AOF receive what the module wrote, with absolute
/// expiries, and never the command itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_and_the_aof_get_the_writes() {
    let dir = std::env::temp_dir().join(format!("tollgate-module-aof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = redis_module::path();
    let primary = RedisServer::start_with(&[
        "--loadmodule",
        &path,
        "--appendonly",
        "yes",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    // The replica keeps the RDB it is sent in its own directory (not the crate's).
    let replica_dir = dir.join("replica");
    std::fs::create_dir_all(&replica_dir).unwrap();
    let replica = RedisServer::start_with(&[
        "--replicaof",
        "127.0.0.1",
        &primary.port().to_string(),
        "--dir",
        replica_dir.to_str().unwrap(),
    ]);
    // The writes below must reach the replica through the command stream, not through the
    // first full sync: wait for the link (a busy machine can take seconds to fork the RDB).
    let linked = async {
        while !replica
            .cmd(&["INFO", "replication"])
            .contains("master_link_status:up")
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), linked)
        .await
        .expect("the replica links to the primary within a minute");
    let p = Profile::from_yaml(
        "name: r\nidentities: { capacity: 64 }\nroute_classes:\n  w:\n    \
         burst: { tokens: 5, per: 1s }\n    sustained: { tokens: 100, per: 1h }\n\
         shared_capacity: { shards: 1, window: 10s, slots_per_window: 100, tenant_share: 1.0 }\n",
    )
    .unwrap();
    let limiter = RedisLimiter::builder(&primary.url(), p)
        .key_secret(b"test")
        .connect()
        .await
        .unwrap();
    assert_eq!(limiter.store_program(), "module");
    let class = limiter.route_class("w").unwrap();
    for who in ["alice", "bob", "alice"] {
        let key = Key::authenticated("acme", who, class).unwrap();
        assert_eq!(limiter.admit(&key).await, Decision::Admit);
    }
    primary.cmd(&["WAIT", "1", "5000"]);
    let mut c = conn(&primary).await;
    let mut r = conn(&replica).await;
    let keys: Vec<String> = cmd("KEYS")
        .arg("tollgate:*:[ic]*")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        keys.len(),
        3,
        "two identities and the capacity hash: {keys:?}"
    );
    for k in &keys {
        let kind: String = cmd("TYPE").arg(k).query_async(&mut c).await.unwrap();
        let dump = |kind: &str| {
            let mut q = cmd(if kind == "hash" { "HGETALL" } else { "GET" });
            q.arg(k);
            q
        };
        let on_primary: Value = dump(&kind).query_async(&mut c).await.unwrap();
        let on_replica: Value = dump(&kind).query_async(&mut r).await.unwrap();
        assert_eq!(on_primary, on_replica, "{k}");
        let at_p: i64 = cmd("PEXPIRETIME").arg(k).query_async(&mut c).await.unwrap();
        let at_r: i64 = cmd("PEXPIRETIME").arg(k).query_async(&mut r).await.unwrap();
        assert!(
            at_p > 0 && at_p == at_r,
            "{k}: expiry {at_p} on the primary, {at_r} on the replica"
        );
    }
    assert_eq!(
        replica.calls("tollgate.admit"),
        0,
        "the command is not replicated"
    );
    assert!(replica.calls("set") >= 3 && replica.calls("hset") >= 3);
    // The AOF holds SET .. PXAT / KEEPTTL and HSET, not the module's command.
    let aof = std::fs::read_dir(dir.join("appendonlydir"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned())
        .collect::<String>();
    assert!(
        aof.contains("PXAT") && aof.contains("HSET") && aof.contains("PEXPIREAT"),
        "{aof}"
    );
    assert!(!aof.to_ascii_lowercase().contains("tollgate.admit"));
    drop((limiter, primary, replica));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A node that loses the module (here `MODULE UNLOAD`): the next call is made with the
/// function, which then decides on the module's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_the_module_gets_the_function() {
    let server = redis_module::server();
    let p = Profile::from_yaml(
        "name: f\nidentities: { capacity: 64 }\nroute_classes:\n  w:\n    \
         burst: { tokens: 5, per: 10s }\n    sustained: { tokens: 100, per: 1h }\n",
    )
    .unwrap();
    let limiter = RedisLimiter::builder(&server.url(), p.clone())
        .key_secret(b"test")
        .connect()
        .await
        .unwrap();
    assert_eq!(limiter.store_program(), "module");
    let off = RedisLimiter::builder(&server.url(), p)
        .key_secret(b"test")
        .redis_module(false)
        .connect()
        .await
        .unwrap();
    assert_eq!(off.store_program(), "function", "redis_module(false)");
    let key = Key::authenticated("acme", "alice", limiter.route_class("w").unwrap()).unwrap();
    for _ in 0..3 {
        assert_eq!(limiter.admit(&key).await, Decision::Admit);
    }
    server.cmd(&["MODULE", "UNLOAD", "tollgate"]);
    for _ in 0..2 {
        assert_eq!(limiter.admit(&key).await, Decision::Admit);
    }
    assert_eq!(limiter.store_program(), "function");
    assert!(matches!(
        limiter.admit(&key).await,
        Decision::Throttle { .. }
    ));
    assert!(matches!(off.admit(&key).await, Decision::Throttle { .. }));
    assert!(server.calls("fcall") >= 3);
}
