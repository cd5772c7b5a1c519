//! `tollgate::tower`: route globs, client addresses behind proxies, and the layer around a plain
//! tower service (no sockets; the gateway tests cover TCP).

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Method, Request, Response};
use tollgate::tower::{
    Caller, Cidr, ForwardedHeader, KeyExtractor, PeerExtractor, RateLimitLayer, RateLimitOutcome,
    RouteTable, VerifiedIdentity,
};
use tollgate::{Decision, KeyError, Limiter, Profile};
use tower::{service_fn, Layer, ServiceExt};

const PROFILE: &str = r#"
name: layer-test
identities: { capacity: 64 }
route_classes:
  read:
    burst:     { tokens: 2, per: 1s }
    sustained: { tokens: 100, per: 1h }
  write:
    mode: shadow
    burst:     { tokens: 1, per: 1s }
    sustained: { tokens: 100, per: 1h }
  special:
    burst:     { tokens: 1, per: 1s }
    sustained: { tokens: 100, per: 1h }
routes:
  - { method: GET,  path: "/v1/**",            class: read }
  - { method: POST, path: "/v1/things/*/run",  class: special }
  - { method: "*",  path: "/v1/**",            class: write }
"#;

fn limiter() -> Arc<Limiter> {
    Arc::new(
        Limiter::builder(Profile::from_yaml(PROFILE).unwrap())
            .build()
            .unwrap(),
    )
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn globs_match_segments_and_the_first_route_wins() {
    let l = limiter();
    let table = RouteTable::compile(&l.profile(), |n| l.route_class(n));
    let class = |m: Method, p: &str| table.classify(&m, p).map(|e| e.class_name().to_owned());
    assert_eq!(class(Method::GET, "/v1/items").as_deref(), Some("read"));
    assert_eq!(class(Method::GET, "/v1/a/b/c").as_deref(), Some("read"));
    assert_eq!(class(Method::GET, "/v1").as_deref(), Some("read"));
    assert_eq!(
        class(Method::POST, "/v1/things/7/run").as_deref(),
        Some("special")
    );
    // `*` is exactly one segment.
    assert_eq!(
        class(Method::POST, "/v1/things/7/8/run").as_deref(),
        Some("write")
    );
    assert_eq!(
        class(Method::POST, "/v1/things/run").as_deref(),
        Some("write")
    );
    assert_eq!(class(Method::DELETE, "/v1/x").as_deref(), Some("write"));
    assert_eq!(class(Method::GET, "/v2/items"), None);
    assert_eq!(class(Method::GET, "/"), None);
    assert_eq!(class(Method::GET, "/v10/items"), None);
    let write = table.classify(&Method::PUT, "/v1/x").unwrap();
    assert_eq!(
        write.policy(),
        "\"burst\";q=1;w=1, \"sustained\";q=100;w=3600"
    );
}

#[test]
fn cidrs_parse_and_contain() {
    let n: Cidr = "10.1.2.3/8".parse().unwrap();
    assert_eq!(n.to_string(), "10.0.0.0/8");
    assert!(n.contains(ip("10.255.0.1")));
    assert!(n.contains(ip("::ffff:10.0.0.1")));
    assert!(!n.contains(ip("11.0.0.1")));
    let v6: Cidr = "2001:db8::/32".parse().unwrap();
    assert!(v6.contains(ip("2001:db8:ffff::1")));
    assert!(!v6.contains(ip("10.0.0.1")));
    let host: Cidr = "192.0.2.1".parse().unwrap();
    assert_eq!(host.to_string(), "192.0.2.1/32");
    let all: Cidr = "0.0.0.0/0".parse().unwrap();
    assert!(all.contains(ip("203.0.113.9")));
    for bad in ["10.0.0.0/33", "10.0.0/8", "x", "::/129", "10.0.0.0/"] {
        assert!(bad.parse::<Cidr>().is_err(), "{bad}");
    }
}

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_static(v));
    }
    h
}

#[test]
fn forwarded_addresses_are_believed_only_from_trusted_proxies() {
    let x = PeerExtractor::new().trust_proxies([
        "10.0.0.0/8".parse().unwrap(),
        "2001:db8::/32".parse().unwrap(),
    ]);
    let spoof = headers(&[("x-forwarded-for", "1.2.3.4")]);
    // Untrusted peer: its headers are ignored.
    assert_eq!(x.client_ip(ip("203.0.113.5"), &spoof), ip("203.0.113.5"));
    // Trusted peer: the rightmost untrusted entry, whatever the client wrote to its left.
    let chain = headers(&[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.2")]);
    assert_eq!(x.client_ip(ip("10.0.0.1"), &chain), ip("198.51.100.7"));
    // Several header lines are one list, in order.
    let lines = headers(&[
        ("x-forwarded-for", "6.6.6.6"),
        ("x-forwarded-for", "198.51.100.8"),
    ]);
    assert_eq!(x.client_ip(ip("10.0.0.1"), &lines), ip("198.51.100.8"));
    // All trusted: the leftmost proxy is as far as the chain goes.
    let inner = headers(&[("x-forwarded-for", "10.9.9.9")]);
    assert_eq!(x.client_ip(ip("10.0.0.1"), &inner), ip("10.9.9.9"));
    // Garbage stops the walk at the last trusted hop.
    let junk = headers(&[("x-forwarded-for", "1.1.1.1, not-an-ip")]);
    assert_eq!(x.client_ip(ip("10.0.0.1"), &junk), ip("10.0.0.1"));
    // No header: the peer itself.
    assert_eq!(
        x.client_ip(ip("10.0.0.1"), &HeaderMap::new()),
        ip("10.0.0.1")
    );
    // Proxies that write X-Forwarded-For: a client's own `Forwarded` is not read.
    let forged = headers(&[
        ("forwarded", "for=6.6.6.6"),
        ("x-forwarded-for", "198.51.100.9"),
    ]);
    assert_eq!(x.client_ip(ip("10.0.0.1"), &forged), ip("198.51.100.9"));

    // Proxies that write RFC 7239 Forwarded: quotes, ports, brackets, other parameters.
    let f = x.clone().forwarded_header(ForwardedHeader::Forwarded);
    let fwd = headers(&[
        ("forwarded", "for=6.6.6.6, for=\"[2001:db8:cafe::17]:4711\""),
        ("x-forwarded-for", "5.5.5.5"),
    ]);
    assert_eq!(f.client_ip(ip("10.0.0.1"), &fwd), ip("6.6.6.6"));
    let fwd = headers(&[
        ("forwarded", "for=\"198.51.100.3:999\", for=10.0.0.5"),
        ("x-forwarded-for", "5.5.5.5"),
    ]);
    assert_eq!(f.client_ip(ip("10.0.0.1"), &fwd), ip("198.51.100.3"));
    let fwd = headers(&[("forwarded", "for=192.0.2.60;proto=http;by=203.0.113.43")]);
    assert_eq!(f.client_ip(ip("10.0.0.1"), &fwd), ip("192.0.2.60"));
    let hidden = headers(&[("forwarded", "for=unknown")]);
    assert_eq!(f.client_ip(ip("10.0.0.1"), &hidden), ip("10.0.0.1"));
    let forged = headers(&[("x-forwarded-for", "6.6.6.6")]);
    assert_eq!(f.client_ip(ip("10.0.0.1"), &forged), ip("10.0.0.1"));
}

#[test]
fn the_verified_identity_wins_over_the_address() {
    let x = PeerExtractor::new();
    let mut req = Request::new(());
    req.extensions_mut()
        .insert(SocketAddr::from(([192, 0, 2, 1], 5555)));
    assert_eq!(x.caller(&req), Caller::Anonymous(ip("192.0.2.1")));
    let id = VerifiedIdentity::new("acme", "alice").unwrap();
    req.extensions_mut().insert(id.clone());
    assert_eq!(x.caller(&req), Caller::Verified(id));
    // No peer address at all: one shared bucket, never unlimited.
    assert_eq!(
        x.caller(&Request::new(())),
        Caller::Anonymous(ip("0.0.0.0"))
    );
    assert_eq!(
        VerifiedIdentity::new("", "a").unwrap_err(),
        KeyError::EmptyTenant
    );
    assert_eq!(
        VerifiedIdentity::new("t", "").unwrap_err(),
        KeyError::EmptyPrincipal
    );
    assert!(!format!("{:?}", VerifiedIdentity::new("acme", "alice").unwrap()).contains("acme"));
}

type Svc = tower::util::BoxCloneService<Request<String>, Response<Vec<u8>>, Infallible>;

fn service(calls: Arc<AtomicUsize>) -> Svc {
    let inner = service_fn(move |req: Request<String>| {
        calls.fetch_add(1, Ordering::Relaxed);
        let seen = req.extensions().get::<RateLimitOutcome>().is_some();
        let id = req
            .headers()
            .get("x-request-id")
            .map(|v| v.to_str().unwrap().to_owned());
        async move {
            let mut r = Response::new(b"ok".to_vec());
            r.headers_mut()
                .insert("x-saw-outcome", HeaderValue::from(u16::from(seen)));
            if let Some(id) = id {
                r.headers_mut()
                    .insert("x-handler-id", HeaderValue::from_str(&id).unwrap());
            }
            Ok::<_, Infallible>(r)
        }
    });
    let layer = RateLimitLayer::new(limiter());
    tower::util::BoxCloneService::new(layer.clone().layer(inner))
}

fn request(method: Method, path: &str) -> Request<String> {
    let mut r = Request::builder()
        .method(method)
        .uri(path)
        .body(String::new())
        .unwrap();
    r.extensions_mut()
        .insert(SocketAddr::from(([192, 0, 2, 1], 5555)));
    r
}

#[tokio::test]
async fn the_layer_enforces_per_request_and_annotates_admitted_responses() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(Arc::clone(&calls));
    for _ in 0..2 {
        let r = svc
            .clone()
            .oneshot(request(Method::GET, "/v1/items"))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["ratelimit-policy"],
            "\"burst\";q=2;w=1, \"sustained\";q=100;w=3600"
        );
        assert_eq!(r.headers()["x-saw-outcome"], "1");
        // The handler saw the same id the caller gets back.
        assert_eq!(r.headers()["x-handler-id"], r.headers()["x-request-id"]);
        let o = r.extensions().get::<RateLimitOutcome>().unwrap();
        assert_eq!(o.decision, Decision::Admit);
        assert_eq!(&*o.class_name, "read");
    }
    let r = svc
        .clone()
        .oneshot(request(Method::GET, "/v1/items"))
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(
        calls.load(Ordering::Relaxed),
        2,
        "a refusal never reaches the handler"
    );
    assert!(r.extensions().get::<RateLimitOutcome>().unwrap().enforced);

    // Unmatched routes pass through unlimited and untouched.
    for _ in 0..5 {
        let r = svc
            .clone()
            .oneshot(request(Method::GET, "/health"))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("ratelimit-policy").is_none());
        assert!(r.headers().get("x-request-id").is_none());
        assert_eq!(r.headers()["x-saw-outcome"], "0");
    }
    assert_eq!(calls.load(Ordering::Relaxed), 7);
}

#[tokio::test]
async fn shadow_mode_lets_refusals_through_but_reports_them() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(Arc::clone(&calls));
    let first = svc
        .clone()
        .oneshot(request(Method::POST, "/v1/items"))
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let second = svc
        .clone()
        .oneshot(request(Method::POST, "/v1/items"))
        .await
        .unwrap();
    assert_eq!(second.status(), 200, "shadow mode admits");
    assert!(second.headers().get("retry-after").is_none());
    let o = second.extensions().get::<RateLimitOutcome>().unwrap();
    assert!(matches!(o.decision, Decision::Throttle { .. }));
    assert!(!o.enforced);
    assert_eq!(calls.load(Ordering::Relaxed), 2);

    // An enforced class next to it still refuses.
    let ok = svc
        .clone()
        .oneshot(request(Method::POST, "/v1/things/1/run"))
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let no = svc
        .clone()
        .oneshot(request(Method::POST, "/v1/things/1/run"))
        .await
        .unwrap();
    assert_eq!(no.status(), 429);
}

/// A backend that answers asynchronously, as a Redis limiter does, and whose store is down.
struct StoreDown(Arc<Limiter>);

impl tollgate::tower::Admission for StoreDown {
    fn route_class(&self, name: &str) -> Option<tollgate::RouteClass> {
        self.0.route_class(name)
    }
    fn profile(&self) -> Arc<Profile> {
        self.0.profile()
    }
    async fn admit(&self, _key: &tollgate::Key<'_>) -> Decision {
        tokio::task::yield_now().await;
        Decision::Unavailable {
            retry_after: None,
            cause: tollgate::Cause::StoreUnavailable,
        }
    }
}

#[tokio::test]
async fn an_async_backend_whose_store_is_down_fails_closed_with_503() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let inner = service_fn(move |_req: Request<String>| {
        seen.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, Infallible>(Response::new(Vec::new())) }
    });
    let svc = RateLimitLayer::new(StoreDown(limiter())).layer(inner);
    let r = svc
        .oneshot(request(Method::GET, "/v1/items"))
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().get("retry-after").is_none());
    assert_eq!(r.headers()["cache-control"], "no-store");
    let body: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!(body["code"], "limiter_unavailable");
    assert!(body.get("retry_after").is_none());
    assert_eq!(calls.load(Ordering::Relaxed), 0);
}

/// An inner service that is never ready: the layer must say so, not enforce through readiness.
#[derive(Clone)]
struct Down;

impl tower::Service<Request<String>> for Down {
    type Response = Response<Vec<u8>>;
    type Error = &'static str;
    type Future = std::future::Ready<Result<Response<Vec<u8>>, &'static str>>;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Err("inner down"))
    }
    fn call(&mut self, _: Request<String>) -> Self::Future {
        unreachable!("never ready")
    }
}

#[tokio::test]
async fn poll_ready_delegates_to_the_inner_service() {
    let svc = RateLimitLayer::new(limiter()).layer(Down);
    let err = svc
        .oneshot(request(Method::GET, "/v1/items"))
        .await
        .unwrap_err();
    assert_eq!(err, "inner down");
}
