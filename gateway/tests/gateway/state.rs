//! The demo gateway's `--state` (`tollgate_ops::state`) in process: quotas used up over
//! HTTP, the last checkpoint of a shutdown, a new gateway restored from it still refusing with
//! the same Retry-After; a refused snapshot stops it unless starting empty was asked for.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::quanta::Clock;
use tollgate::{Limiter, Profile};

use tollgate::snapshot::StateFile as State;
use tollgate_gateway::app;
use tollgate_ops::state;

const PROFILE: &str = r#"
name: state-test
identities: { capacity: 1024 }
route_classes:
  read:
    burst:     { tokens: 5,  per: 1s }
    sustained: { tokens: 600, per: 1h }
  registration:
    burst:     { tokens: 2,  per: 1m }
    sustained: { tokens: 20, per: 1d }
routes:
  - { method: POST, path: "/v1/register", class: registration }
  - { method: "*",  path: "/v1/**",       class: read }
"#;

const TOKENS: &str = "tokens:\n  acme-alice-token: { tenant: acme, principal: alice }\n";
const SECRET: &[u8] = b"gateway-state-test";

fn builder() -> (tollgate::Builder, Arc<tollgate::quanta::Mock>) {
    let (clock, mock) = Clock::mock();
    let b = Limiter::builder(Profile::from_yaml(PROFILE).unwrap()).clock(clock);
    (b, mock)
}

/// Serves the gateway's router for `limiter` on a free loopback port.
async fn serve(limiter: Arc<Limiter>) -> SocketAddr {
    let router = app::router(limiter, app::Tokens::from_yaml(TOKENS).unwrap(), Vec::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// POST /v1/register as alice: the status and the Retry-After seconds, if any.
async fn register(addr: SocketAddr) -> (StatusCode, Option<u64>) {
    let client = Client::builder(TokioExecutor::new()).build_http::<String>();
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{addr}/v1/register"))
        .header("authorization", "Bearer acme-alice-token")
        .body(String::new())
        .unwrap();
    let res = tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("answers within 10 s")
        .unwrap();
    let secs = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    (res.status(), secs)
}

#[tokio::test]
async fn used_up_registrations_survive_a_gateway_restart() {
    let dir = std::env::temp_dir().join(format!("tollgate-gw-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let st = State {
        every: Duration::from_secs(3600),
        ..State::new(dir.join("state.tgsnap"))
    };
    // --state without a secret is refused before anything starts.
    let (b, _) = builder();
    assert!(state::open(b, Some(&st))
        .unwrap_err()
        .contains(tollgate::KEY_SECRET_ENV));

    // First start: no file yet.
    let (b, mock) = builder();
    let first = Arc::new(state::open(b.key_secret(SECRET), Some(&st)).unwrap());
    let cp = state::checkpoint(&first, &st).unwrap();
    let addr = serve(Arc::clone(&first)).await;
    for i in 0..20 {
        assert_eq!(
            register(addr).await.0,
            StatusCode::CREATED,
            "registration {i}"
        );
        mock.increment(Duration::from_secs(30));
    }
    let (status, before) = register(addr).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let before = before.expect("a Retry-After");
    // SIGTERM's path: the last checkpoint.
    state::finish(cp).unwrap();

    let (b, _) = builder();
    let second = Arc::new(state::open(b.key_secret(SECRET), Some(&st)).unwrap());
    let (status, after) = register(serve(second).await).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "still used up");
    let after = after.expect("a Retry-After");
    // Only the real wall-clock time of this test passed in between (rounded up to seconds).
    assert!(
        after <= before && after + 2 >= before,
        "{before} s, then {after} s"
    );

    // A corrupt snapshot stops the gateway, with the reason and the way out...
    let mut bytes = std::fs::read(&st.path).unwrap();
    let n = bytes.len();
    bytes[n - 20] ^= 0xff;
    std::fs::write(&st.path, &bytes).unwrap();
    let (b, _) = builder();
    let e = state::open(b.key_secret(SECRET), Some(&st)).unwrap_err();
    assert!(
        e.contains("corrupt") && e.contains("--state-start-empty-on-refusal"),
        "{e}"
    );
    // ...unless starting empty was asked for.
    let empty = State {
        start_empty_on_refusal: true,
        ..st.clone()
    };
    let (b, _) = builder();
    let fresh = Arc::new(state::open(b.key_secret(SECRET), Some(&empty)).unwrap());
    assert_eq!(register(serve(fresh).await).await.0, StatusCode::CREATED);
    std::fs::remove_dir_all(&dir).unwrap();
}
