//! `tollgate::tower`: the layer around a plain tower service (no sockets; the gateway tests
//! cover TCP).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::{HeaderValue, Method, Request, Response};
use tollgate::tower::{RateLimitLayer, RateLimitOutcome};
use tollgate::{Decision, Limiter, Profile};
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

pub(crate) fn limiter() -> Arc<Limiter> {
    Arc::new(
        Limiter::builder(Profile::from_yaml(PROFILE).unwrap())
            .build()
            .unwrap(),
    )
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

/// The HTTP types the layer works with moved to `tollgate::http`; the paths users wrote before,
/// under `tollgate::tower`, still name the same types.
#[test]
fn the_http_types_keep_their_tower_paths() {
    use std::any::TypeId;
    assert_eq!(
        TypeId::of::<tollgate::tower::PeerExtractor>(),
        TypeId::of::<tollgate::http::PeerExtractor>()
    );
    assert_eq!(
        TypeId::of::<tollgate::tower::Cidr>(),
        TypeId::of::<tollgate::http::Cidr>()
    );
    assert_eq!(
        TypeId::of::<tollgate::tower::CidrError>(),
        TypeId::of::<tollgate::http::CidrError>()
    );
    assert_eq!(
        TypeId::of::<tollgate::tower::ForwardedHeader>(),
        TypeId::of::<tollgate::http::ForwardedHeader>()
    );
    assert_eq!(
        TypeId::of::<tollgate::tower::VerifiedIdentity>(),
        TypeId::of::<tollgate::http::VerifiedIdentity>()
    );
    assert_eq!(
        TypeId::of::<tollgate::tower::Caller>(),
        TypeId::of::<tollgate::http::Caller>()
    );
    assert_eq!(
        TypeId::of::<tollgate::tower::RouteTable>(),
        TypeId::of::<tollgate::http::RouteTable>()
    );
    assert_eq!(
        TypeId::of::<tollgate::tower::RouteEntry>(),
        TypeId::of::<tollgate::http::RouteEntry>()
    );
    fn extractor<X: tollgate::tower::KeyExtractor>() {}
    fn backend<A: tollgate::tower::Admission>() {}
    extractor::<tollgate::http::PeerExtractor>();
    backend::<Arc<Limiter>>();
}
