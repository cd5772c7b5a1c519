//! The demo gateway's router over real TCP on loopback: exact refusals, waiting out
//! Retry-After, tenant isolation, the anonymous class, proxies, request ids.

use tollgate_gateway::app;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tollgate::http::Cidr;
use tollgate::quanta::{Clock, Mock};
use tollgate::{Limiter, Profile};

const TOKENS: &str = r#"
tokens:
  acme-alice-token:   { tenant: acme,   principal: alice }
  globex-carol-token: { tenant: globex, principal: carol }
"#;

pub(super) const ALICE: &str = "Bearer acme-alice-token";
pub(super) const CAROL: &str = "Bearer globex-carol-token";

/// One route class per limited route, with small buckets; `{extra}` goes at the top level.
/// Shared capacity is generous (the tenant counters take identity slots too).
fn profile(extra: &str, capacity: u64) -> Profile {
    profile_with(
        extra,
        capacity,
        "{ shards: 1, window: 1s, slots_per_window: 1000, tenant_share: 0.5 }",
    )
}

fn profile_with(extra: &str, capacity: u64, shared: &str) -> Profile {
    Profile::from_yaml(&format!(
        r#"
name: gateway-test
{extra}
identities: {{ capacity: {capacity} }}
route_classes:
  read:
    burst:     {{ tokens: 5,  per: 1s }}
    sustained: {{ tokens: 600, per: 1h }}
  write:
    burst:     {{ tokens: 1,  per: 1s }}
    sustained: {{ tokens: 100, per: 1h }}
  registration:
    burst:     {{ tokens: 2,  per: 1m }}
    sustained: {{ tokens: 20, per: 1d }}
shared_capacity: {shared}
routes:
  - {{ method: GET,  path: "/v1/**",       class: read }}
  - {{ method: POST, path: "/v1/register", class: registration }}
  - {{ method: "*",  path: "/v1/**",       class: write }}
catalog:
  throttled:           {{ code: rate_limited,        type: "https://errors.example.com/rate-limited" }}
  over_capacity:       {{ code: over_capacity,       type: "https://errors.example.com/over-capacity" }}
  limiter_unavailable: {{ code: limiter_unavailable, type: "https://errors.example.com/limiter-unavailable" }}
"#
    ))
    .unwrap()
}

pub(super) struct Gateway {
    addr: SocketAddr,
    client: Client<HttpConnector, String>,
    limiter: Arc<Limiter>,
}

pub(super) struct Reply {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Vec<u8>,
}

impl Reply {
    pub(super) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
    /// Every header name, value and body byte, for leak scans.
    fn all_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in &self.headers {
            out.extend_from_slice(k.as_str().as_bytes());
            out.push(b':');
            out.extend_from_slice(v.as_bytes());
            out.push(b'\n');
        }
        out.extend_from_slice(&self.body);
        out
    }
}

pub(super) async fn start(profile: Profile, clock: Option<Clock>, trusted: &[&str]) -> Gateway {
    let mut builder = Limiter::builder(profile);
    if let Some(c) = clock {
        builder = builder.clock(c);
    }
    let limiter = Arc::new(builder.build().unwrap());
    let trusted: Vec<Cidr> = trusted.iter().map(|c| c.parse().unwrap()).collect();
    let router = app::router(
        Arc::clone(&limiter),
        app::Tokens::from_yaml(TOKENS).unwrap(),
        trusted,
    );
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
    let client = Client::builder(TokioExecutor::new()).build_http();
    Gateway {
        addr,
        client,
        limiter,
    }
}

impl Gateway {
    pub(super) async fn send(&self, method: Method, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{}", self.addr, path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let fut = self.client.request(req.body(String::new()).unwrap());
        let res = tokio::time::timeout(Duration::from_secs(10), fut)
            .await
            .expect("the gateway answers within 10 s")
            .unwrap();
        let (parts, body) = res.into_parts();
        let body = body.collect().await.unwrap().to_bytes().to_vec();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }
}

fn is_generated_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[tokio::test]
async fn throttle_is_an_exact_429_and_waiting_retry_after_is_enough() {
    let (clock, mock): (Clock, Arc<Mock>) = Clock::mock();
    let gw = start(profile("", 64), Some(clock), &[]).await;
    let auth = [("authorization", ALICE)];
    let ok = gw.send(Method::POST, "/v1/items", &auth).await;
    assert_eq!(ok.status, StatusCode::CREATED);
    assert_eq!(
        ok.headers["ratelimit-policy"],
        "\"burst\";q=1;w=1, \"sustained\";q=100;w=3600"
    );
    assert!(ok.headers.get("retry-after").is_none());

    let no = gw
        .send(
            Method::POST,
            "/v1/items",
            &[("authorization", ALICE), ("x-request-id", "trace-123")],
        )
        .await;
    assert_eq!(no.status, StatusCode::TOO_MANY_REQUESTS);
    let h = &no.headers;
    assert_eq!(h["content-type"], "application/problem+json");
    assert_eq!(h["cache-control"], "no-store");
    assert_eq!(h["x-request-id"], "trace-123");
    assert_eq!(
        h["ratelimit-policy"],
        "\"burst\";q=1;w=1, \"sustained\";q=100;w=3600"
    );
    assert!(h.get("ratelimit").is_none(), "expose_remaining is off");
    let secs: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(secs >= 1);
    assert_eq!(
        no.json(),
        json!({
            "type": "https://errors.example.com/rate-limited",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "You have used your burst quota for this route; retry after 1 second.",
            "code": "rate_limited",
            "request_id": "trace-123",
            "retry_after": secs,
            "violated-policies": ["burst"],
        })
    );

    // Just short of the wait: still refused; after exactly Retry-After: admitted.
    mock.increment(Duration::from_secs(secs) - Duration::from_millis(1));
    let early = gw.send(Method::POST, "/v1/items", &auth).await;
    assert_eq!(early.status, StatusCode::TOO_MANY_REQUESTS);
    mock.increment(Duration::from_millis(1));
    let again = gw.send(Method::POST, "/v1/items", &auth).await;
    assert_eq!(again.status, StatusCode::CREATED);
}

#[tokio::test]
async fn waiting_retry_after_on_the_real_clock_is_admitted() {
    let gw = start(profile("", 64), None, &[]).await;
    let auth = [("authorization", CAROL)];
    assert_eq!(
        gw.send(Method::POST, "/v1/items", &auth).await.status,
        StatusCode::CREATED
    );
    let no = gw.send(Method::POST, "/v1/items", &auth).await;
    assert_eq!(no.status, StatusCode::TOO_MANY_REQUESTS);
    let secs: u64 = no.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&secs));
    tokio::time::sleep(Duration::from_secs(secs)).await;
    assert_eq!(
        gw.send(Method::POST, "/v1/items", &auth).await.status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn a_full_table_is_an_exact_503_without_retry_after() {
    // No shared capacity: its tenant counters would take the one slot.
    let gw = start(profile_with("", 1, "null"), None, &[]).await;
    let first = gw
        .send(Method::GET, "/v1/items", &[("authorization", ALICE)])
        .await;
    assert_eq!(
        first.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let full = gw
        .send(Method::GET, "/v1/items", &[("authorization", CAROL)])
        .await;
    assert_eq!(full.status, StatusCode::SERVICE_UNAVAILABLE);
    let h = &full.headers;
    assert_eq!(h["content-type"], "application/problem+json");
    assert_eq!(h["cache-control"], "no-store");
    assert!(h.get("retry-after").is_none());
    let id = h["x-request-id"].to_str().unwrap().to_owned();
    assert!(is_generated_id(&id));
    assert_eq!(
        full.json(),
        json!({
            "type": "https://errors.example.com/over-capacity",
            "title": "Service Unavailable",
            "status": 503,
            "detail": "The service is at capacity; retry later.",
            "code": "over_capacity",
            "request_id": id,
        })
    );
    let bytes = full.all_bytes();
    for secret in ["acme", "alice"] {
        assert!(!contains(&bytes, secret), "503 leaks {secret}");
    }
}

#[tokio::test]
async fn a_used_tenant_share_is_503_with_the_next_window() {
    let (clock, mock): (Clock, Arc<Mock>) = Clock::mock();
    // Two slots a window, at most one per tenant.
    let shared = "{ shards: 1, window: 10s, slots_per_window: 2, tenant_share: 0.5 }";
    let gw = start(profile_with("", 64, shared), Some(clock), &[]).await;
    mock.increment(Duration::from_millis(2_500));
    let ok = gw
        .send(Method::GET, "/v1/items", &[("authorization", ALICE)])
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    let ok = gw
        .send(Method::GET, "/v1/items", &[("authorization", CAROL)])
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    let no = gw
        .send(Method::GET, "/v1/items", &[("authorization", ALICE)])
        .await;
    assert_eq!(no.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        no.headers["retry-after"], "8",
        "the next window, rounded up"
    );
    assert_eq!(no.headers["cache-control"], "no-store");
    let id = no.headers["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(
        no.json(),
        json!({
            "type": "https://errors.example.com/over-capacity",
            "title": "Service Unavailable",
            "status": 503,
            "detail": "The service is at capacity; retry after 8 seconds.",
            "code": "over_capacity",
            "request_id": id,
            "retry_after": 8,
        })
    );
    let bytes = no.all_bytes();
    for secret in ["globex", "carol"] {
        assert!(!contains(&bytes, secret), "503 leaks {secret}");
    }
    mock.increment(Duration::from_secs(8));
    let ok = gw
        .send(Method::GET, "/v1/items", &[("authorization", ALICE)])
        .await;
    assert_eq!(ok.status, StatusCode::OK, "admitted in the next window");
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

#[tokio::test]
async fn two_tenants_one_flooding_never_see_each_other() {
    let gw = start(profile("expose_remaining: true", 64), None, &[]).await;
    let mut to_acme = Vec::new();
    let mut to_globex = Vec::new();
    for round in 0..12 {
        for _ in 0..3 {
            to_globex.push(
                gw.send(Method::GET, "/v1/items", &[("authorization", CAROL)])
                    .await,
            );
            to_globex.push(
                gw.send(Method::POST, "/v1/items", &[("authorization", CAROL)])
                    .await,
            );
        }
        if round % 4 == 0 {
            to_acme.push(
                gw.send(Method::GET, "/v1/items", &[("authorization", ALICE)])
                    .await,
            );
        }
    }
    assert!(to_globex
        .iter()
        .any(|r| r.status == StatusCode::TOO_MANY_REQUESTS));
    // Acme's first request sees its own full bucket less one, whatever globex did.
    let first = &to_acme[0];
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.headers["ratelimit"],
        "\"burst\";r=4;t=1, \"sustained\";r=599;t=6"
    );
    for r in &to_acme {
        assert_eq!(r.status, StatusCode::OK, "acme is not starved by globex");
        let bytes = r.all_bytes();
        for secret in ["globex", "carol"] {
            assert!(!contains(&bytes, secret), "acme saw {secret}");
        }
    }
    for r in &to_globex {
        let bytes = r.all_bytes();
        for secret in ["acme", "alice"] {
            assert!(!contains(&bytes, secret), "globex saw {secret}");
        }
        // The only rate-limit state a response carries is the caller's own policy and tokens.
        for name in r.headers.keys() {
            assert!(
                [
                    "content-type",
                    "content-length",
                    "date",
                    "x-request-id",
                    "ratelimit-policy",
                    "ratelimit",
                    "retry-after",
                    "cache-control",
                ]
                .contains(&name.as_str()),
                "unexpected header {name}"
            );
        }
    }
    // The discovery document names no tenant either.
    let doc = gw.send(Method::GET, "/.well-known/rate-limits", &[]).await;
    assert_eq!(doc.status, StatusCode::OK);
    let bytes = doc.all_bytes();
    for secret in ["acme", "alice", "globex", "carol"] {
        assert!(!contains(&bytes, secret), "discovery names {secret}");
    }
    let classes = doc.json()["route_classes"].as_array().unwrap().clone();
    let write = classes.iter().find(|c| c["name"] == "write").unwrap();
    assert_eq!(write["burst"], json!({ "tokens": 1, "per": "1s" }));
}

#[tokio::test]
async fn the_anonymous_class_groups_a_24_behind_a_trusted_proxy() {
    let gw = start(profile("", 64), None, &["127.0.0.0/8"]).await;
    let from = |ip: &'static str| [("x-forwarded-for", ip)];
    // registration: burst 2 per minute, per /24.
    let a = gw
        .send(Method::POST, "/v1/register", &from("198.51.100.1"))
        .await;
    let b = gw
        .send(Method::POST, "/v1/register", &from("198.51.100.200"))
        .await;
    let c = gw
        .send(Method::POST, "/v1/register", &from("198.51.100.77"))
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert_eq!(b.status, StatusCode::CREATED);
    assert_eq!(
        c.status,
        StatusCode::TOO_MANY_REQUESTS,
        "same /24, same bucket"
    );
    let other = gw
        .send(Method::POST, "/v1/register", &from("198.51.101.1"))
        .await;
    assert_eq!(
        other.status,
        StatusCode::CREATED,
        "another /24, another bucket"
    );
    // A client-written entry left of the proxy's own is not believed.
    let spoof = gw
        .send(
            Method::POST,
            "/v1/register",
            &[("x-forwarded-for", "203.0.113.1, 198.51.100.9")],
        )
        .await;
    assert_eq!(spoof.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_spoofed_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let gw = start(profile("", 64), None, &[]).await;
    let statuses: Vec<StatusCode> = {
        let mut v = Vec::new();
        for ip in ["203.0.113.1", "198.51.100.1", "192.0.2.1"] {
            let r = gw
                .send(
                    Method::POST,
                    "/v1/register",
                    &[("x-forwarded-for", ip), ("forwarded", "for=192.0.2.99")],
                )
                .await;
            v.push(r.status);
        }
        v
    };
    assert_eq!(
        statuses,
        [
            StatusCode::CREATED,
            StatusCode::CREATED,
            StatusCode::TOO_MANY_REQUESTS
        ],
        "every request is keyed by the real peer (127.0.0.1)"
    );
}

#[tokio::test]
async fn request_ids_are_echoed_when_well_formed_and_replaced_otherwise() {
    let gw = start(profile("", 64), None, &[]).await;
    let kept = gw
        .send(Method::GET, "/v1/items", &[("x-request-id", "abc-123.x_y")])
        .await;
    assert_eq!(kept.headers["x-request-id"], "abc-123.x_y");
    let long = "a".repeat(129);
    for bad in ["<script>alert(1)</script>", "has space", long.as_str()] {
        let r = gw
            .send(Method::GET, "/v1/items", &[("x-request-id", bad)])
            .await;
        assert_eq!(r.status, StatusCode::OK);
        let id = r.headers["x-request-id"].to_str().unwrap();
        assert!(is_generated_id(id), "{bad:?} was replaced by {id:?}");
        assert!(!contains(&r.all_bytes(), "script"));
    }
    // The refusal body carries the same (replaced) id as its header.
    for _ in 0..5 {
        gw.send(Method::GET, "/v1/items", &[]).await;
    }
    let no = gw
        .send(Method::GET, "/v1/items", &[("x-request-id", "bad id")])
        .await;
    assert_eq!(no.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        no.json()["request_id"],
        no.headers["x-request-id"].to_str().unwrap()
    );
    assert!(is_generated_id(
        no.headers["x-request-id"].to_str().unwrap()
    ));
}

#[tokio::test]
async fn an_unknown_token_is_401_and_unlimited_routes_stay_free() {
    let gw = start(profile("", 64), None, &[]).await;
    let r = gw
        .send(
            Method::GET,
            "/v1/items",
            &[("authorization", "Bearer not-a-token")],
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.json()["code"], "unauthorized");
    // Guessing tokens is charged to the guesser's anonymous class (read: burst 5).
    let mut statuses = Vec::new();
    for i in 0..6 {
        let token = format!("Bearer guess-{i}");
        let r = gw
            .send(Method::GET, "/v1/items", &[("authorization", &token)])
            .await;
        statuses.push(r.status);
    }
    assert_eq!(statuses[..4], [StatusCode::UNAUTHORIZED; 4]);
    assert_eq!(statuses[4..], [StatusCode::TOO_MANY_REQUESTS; 2]);
    for _ in 0..20 {
        let doc = gw.send(Method::GET, "/.well-known/rate-limits", &[]).await;
        assert_eq!(doc.status, StatusCode::OK);
        assert!(doc.headers.get("ratelimit-policy").is_none());
    }
    // Global counts are not on the public listener: they are the operators' own.
    assert_eq!(
        gw.send(Method::GET, "/metrics", &[]).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_reload_changes_published_limits_and_headers_and_a_bad_one_changes_nothing() {
    let gw = start(profile("", 64), None, &[]).await;
    let dir = std::env::temp_dir().join(format!("tollgate-gateway-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("profile.yaml");
    let policy = |r: &Reply| r.headers["ratelimit-policy"].to_str().unwrap().to_owned();
    let auth = [("authorization", ALICE)];

    let before = gw.send(Method::POST, "/v1/items", &auth).await;
    assert_eq!(before.status, StatusCode::CREATED);
    assert_eq!(
        policy(&before),
        "\"burst\";q=1;w=1, \"sustained\";q=100;w=3600"
    );

    std::fs::write(&path, "name: broken\nidentities: { capacity: 64 }\n").unwrap();
    let err = app::reload(&*gw.limiter, &path).unwrap_err();
    assert!(err.contains("route_classes"), "{err}");
    let same = gw.send(Method::POST, "/v1/items", &auth).await;
    assert_eq!(
        same.status,
        StatusCode::TOO_MANY_REQUESTS,
        "old limits and state stay"
    );

    // The same profile with a write burst of 3: the bucket state carries over, the policy
    // header and the discovery document follow at once.
    let src = serde_yaml_ng::to_string(&*gw.limiter.profile()).unwrap();
    let bigger = src.replacen("tokens: 1\n", "tokens: 3\n", 1);
    assert_ne!(src, bigger);
    std::fs::write(&path, bigger).unwrap();
    app::reload(&*gw.limiter, &path).unwrap();
    let after = gw.send(Method::POST, "/v1/items", &auth).await;
    assert_eq!(
        policy(&after),
        "\"burst\";q=3;w=1, \"sustained\";q=100;w=3600"
    );
    let doc = gw.send(Method::GET, "/.well-known/rate-limits", &[]).await;
    let classes = doc.json()["route_classes"].as_array().unwrap().clone();
    let write = classes.iter().find(|c| c["name"] == "write").unwrap();
    assert_eq!(write["burst"]["tokens"], 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn metrics_are_served_on_the_operators_router_only() {
    use tower::ServiceExt;
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        metrics::counter!("tollgate_b6_probe_total").increment(3);
    });
    let response = app::operator_router(handle)
        .oneshot(
            Request::get("/metrics")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("tollgate_b6_probe_total 3"), "{text}");
}
