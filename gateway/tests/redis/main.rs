//! `tollgate-gateway --redis`: two gateway processes over one real `redis-server` (started on a
//! free loopback port by the testkit harness) share each caller's buckets; a class with a
//! `lease` never admits past its limit across both, gives its unspent rest back when a gateway
//! stops, and strands at most what a killed gateway held.
//! Feature `redis`: `cargo test -p tollgate-gateway --features redis --test redis`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use http::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate_testkit::redis_server::{free_port, RedisServer};

/// `write` is charged per decision; `read` from leases of at most 16 tokens. Both buckets are
/// long enough that nothing refills during a test.
const PROFILE: &str = "\
name: gateway-redis
identities: { capacity: 1024 }
route_classes:
  write:
    burst:     { tokens: 3, per: 1h }
    sustained: { tokens: 50, per: 1d }
  read:
    burst:     { tokens: 40, per: 1h }
    sustained: { tokens: 1000, per: 1d }
    lease:     { max_tokens: 16, ttl: 30s }
routes:
  - { method: POST, path: \"/v1/items\", class: write }
  - { method: GET,  path: \"/v1/items\", class: read }
";

const TOKENS: &str = "tokens:
  alice-token: { tenant: acme, principal: alice }
  bob-token:   { tenant: acme, principal: bob }
  carol-token: { tenant: acme, principal: carol }
  dave-token:  { tenant: acme, principal: dave }
";

/// The burst of `read`: the most any caller may be admitted on it, over every gateway.
const READ_LIMIT: usize = 40;

/// A `tollgate-gateway --redis` process, killed on drop.
struct Gateway {
    child: Child,
    addr: SocketAddr,
}

/// The profile and token files, written once per test process: the tests run in parallel, and
/// writing again truncates the file under a gateway that is reading it.
fn files() -> (PathBuf, PathBuf) {
    static FILES: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    FILES
        .get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("tg-gateway-redis-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let (profile, tokens) = (dir.join("profile.yaml"), dir.join("tokens.yaml"));
            std::fs::write(&profile, PROFILE).unwrap();
            std::fs::write(&tokens, TOKENS).unwrap();
            (profile, tokens)
        })
        .clone()
}

impl Gateway {
    /// Starts a gateway on a free port; a port taken by another process between `free_port`
    /// and the gateway's bind is tried again on another.
    async fn start(redis: &RedisServer) -> Gateway {
        let (profile, tokens) = files();
        for attempt in 0..5 {
            let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let log = profile.with_file_name(format!("gateway-{}-{attempt}.log", addr.port()));
            let log_file = std::fs::File::create(&log).unwrap();
            let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate-gateway"))
                .arg("--listen")
                .arg(addr.to_string())
                .args(["--operator-listen", "off", "--redis", &redis.url()])
                .arg("--profile")
                .arg(&profile)
                .arg("--tokens")
                .arg(&tokens)
                .env_remove("TOLLGATE_ADMIN_TOKEN")
                .stdout(Stdio::from(log_file.try_clone().unwrap()))
                .stderr(log_file)
                .spawn()
                .unwrap();
            let start = Instant::now();
            loop {
                let output = || std::fs::read_to_string(&log).unwrap_or_default();
                // Its own log line, not a connect: another process may hold the port.
                if output().contains("gateway listening") {
                    return Gateway { child, addr };
                }
                if let Some(status) = child.try_wait().unwrap() {
                    let output = output();
                    assert!(
                        output.contains("in use"),
                        "the gateway exited ({status}) before listening on {addr}:\n{output}"
                    );
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "the gateway did not listen on {addr} within 20 s:\n{}",
                    output()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        panic!("five free ports were taken before the gateway could bind them");
    }

    /// Sends `signal` and waits (at most 10 s) for the process to exit.
    fn stop(mut self, signal: libc::c_int) {
        // SAFETY: kill only sends a signal to our own child, whose pid is still ours (not waited
        // for yet).
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0);
        let start = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "gateway did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One request as the caller with `token`: the status, the Retry-After seconds and the body.
    async fn call(&self, method: Method, token: &str) -> (StatusCode, Option<u64>, String) {
        let client = Client::builder(TokioExecutor::new()).build_http::<String>();
        let req = Request::builder()
            .method(method)
            .uri(format!("http://{}/v1/items", self.addr))
            .header("authorization", format!("Bearer {token}"))
            .body(String::new())
            .unwrap();
        let res = tokio::time::timeout(Duration::from_secs(10), client.request(req))
            .await
            .expect("answers within 10 s")
            .unwrap();
        let status = res.status();
        let secs = res
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().parse().unwrap());
        let body = http_body_util::BodyExt::collect(res.into_body())
            .await
            .unwrap()
            .to_bytes();
        (status, secs, String::from_utf8(body.to_vec()).unwrap())
    }

    /// `GET /v1/items` as `token` until the first 429: how many were admitted.
    async fn read_until_refused(&self, token: &str) -> usize {
        for admitted in 0..=READ_LIMIT {
            let (status, _, _) = self.call(Method::GET, token).await;
            if status == StatusCode::TOO_MANY_REQUESTS {
                return admitted;
            }
            assert_eq!(status, StatusCode::OK);
        }
        panic!("admitted more than the limit of {READ_LIMIT}");
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_each_callers_buckets() {
    let redis = RedisServer::start();
    let (a, b) = (Gateway::start(&redis).await, Gateway::start(&redis).await);
    for gw in [&a, &b, &a] {
        assert_eq!(
            gw.call(Method::POST, "alice-token").await.0,
            StatusCode::CREATED
        );
    }
    // The burst of 3 was spent across both: each refuses, with the store's Retry-After.
    for gw in [&b, &a] {
        let (status, secs, body) = gw.call(Method::POST, "alice-token").await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        let secs = secs.expect("a Retry-After");
        assert!((1..=3600).contains(&secs), "{secs}");
        assert!(body.contains("\"code\":\"rate_limited\""), "{body}");
    }
    // Another caller of the same tenant is untouched.
    assert_eq!(
        b.call(Method::POST, "bob-token").await.0,
        StatusCode::CREATED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_reads_across_two_gateways_never_pass_the_limit() {
    let redis = RedisServer::start();
    let (a, b) = (Gateway::start(&redis).await, Gateway::start(&redis).await);
    let mut admitted = 0;
    for i in 0..2 * READ_LIMIT {
        let gw = if i % 2 == 0 { &a } else { &b };
        match gw.call(Method::GET, "alice-token").await.0 {
            StatusCode::OK => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("{other}"),
        }
    }
    // Every token was leased before it was spent, and a lease that would not fit is asked
    // again for one token: the two gateways together admit the burst exactly.
    assert_eq!(admitted, READ_LIMIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_gateway_gives_its_lease_back_and_a_killed_one_strands_it() {
    let redis = RedisServer::start();
    let b = Gateway::start(&redis).await;

    // bob: three reads on a gateway that then stops (SIGTERM) with the rest of a lease in hand.
    let a = Gateway::start(&redis).await;
    for _ in 0..3 {
        assert_eq!(a.call(Method::GET, "bob-token").await.0, StatusCode::OK);
    }
    a.stop(libc::SIGTERM);
    assert_eq!(b.read_until_refused("bob-token").await, READ_LIMIT - 3);

    // carol: the same, but the gateway is killed (SIGKILL): what it held is stranded, since
    // nothing in the store gives a lease back; the bucket refills it at its own rate.
    let a = Gateway::start(&redis).await;
    for _ in 0..3 {
        assert_eq!(a.call(Method::GET, "carol-token").await.0, StatusCode::OK);
    }
    a.stop(libc::SIGKILL);
    let stranded = READ_LIMIT - 3 - b.read_until_refused("carol-token").await;
    // At most one lease (16 tokens) of one identity; the lease in hand after three decisions
    // is the second (8 tokens) less the two it served.
    println!("tokens stranded by the killed gateway: {stranded}");
    assert!((1..=16).contains(&stranded), "{stranded}");
}
