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

/// The layer with every option on (outcomes in requests and responses, ids on every response),
/// over `limiter`.
fn service_over(limiter: Arc<Limiter>, calls: Arc<AtomicUsize>) -> Svc {
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
    let layer = RateLimitLayer::new(limiter)
        .outcome_in_request()
        .outcome_in_response()
        .request_id_on_every_response();
    tower::util::BoxCloneService::new(layer.clone().layer(inner))
}

fn service(calls: Arc<AtomicUsize>) -> Svc {
    service_over(limiter(), calls)
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
    let limiter = limiter();
    let svc = service_over(Arc::clone(&limiter), Arc::clone(&calls));
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
        assert_eq!(Some(o.class), limiter.route_class("read"));
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
    async fn admit_n(&self, key: &tollgate::Key<'_>, _n: u32) -> Decision {
        tollgate::tower::Admission::admit(self, key).await
    }
    async fn admit_all(&self, items: &[(tollgate::Key<'_>, u32)]) -> Result<(), tollgate::Refused> {
        match items.first() {
            None => Ok(()),
            Some((key, _)) => Err(tollgate::Refused {
                index: 0,
                decision: tollgate::tower::Admission::admit(self, key).await,
            }),
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

/// The layer without options, as `RateLimitLayer::new` makes it.
fn plain_service(limiter: Arc<Limiter>, calls: Arc<AtomicUsize>) -> Svc {
    service_with(limiter, calls, |layer| layer)
}

/// The layer with the options `options` sets, over a handler that reports what it saw.
fn service_with(
    limiter: Arc<Limiter>,
    calls: Arc<AtomicUsize>,
    options: impl FnOnce(RateLimitLayer<Arc<Limiter>>) -> RateLimitLayer<Arc<Limiter>>,
) -> Svc {
    let inner = service_fn(move |req: Request<String>| {
        calls.fetch_add(1, Ordering::Relaxed);
        let seen = req.extensions().get::<RateLimitOutcome>().is_some();
        let id = req.headers().get("x-request-id").cloned();
        async move {
            let mut r = Response::new(b"ok".to_vec());
            r.headers_mut()
                .insert("x-saw-outcome", HeaderValue::from(u16::from(seen)));
            if let Some(id) = id {
                r.headers_mut().insert("x-handler-id", id);
            }
            Ok::<_, Infallible>(r)
        }
    });
    tower::util::BoxCloneService::new(options(RateLimitLayer::new(limiter)).layer(inner))
}

fn with_id(mut r: Request<String>, id: &str) -> Request<String> {
    r.headers_mut()
        .insert("x-request-id", HeaderValue::from_str(id).unwrap());
    r
}

#[tokio::test]
async fn by_default_admitted_responses_get_no_outcome_and_no_generated_id() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = plain_service(limiter(), Arc::clone(&calls));
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
    assert!(r.headers().get("x-request-id").is_none());
    assert!(
        r.headers().get("x-handler-id").is_none(),
        "no id put on the request"
    );
    assert_eq!(r.headers()["x-saw-outcome"], "0");
    assert!(r.extensions().get::<RateLimitOutcome>().is_none());

    // A caller's well-formed id reaches the handler as it came; the response does not echo it.
    let r = svc
        .clone()
        .oneshot(with_id(request(Method::GET, "/v1/items"), "abc-1"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-handler-id"], "abc-1");
    assert!(r.headers().get("x-request-id").is_none());
}

#[tokio::test]
async fn the_outcome_in_the_request_alone_adds_nothing_to_the_response() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service_with(limiter(), Arc::clone(&calls), |l| l.outcome_in_request());
    let r = svc
        .oneshot(request(Method::GET, "/v1/items"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-saw-outcome"], "1", "the handler got it");
    assert!(r.extensions().get::<RateLimitOutcome>().is_none());
    assert!(r.headers().get("x-request-id").is_none());
    assert!(r.headers().get("ratelimit-policy").is_some());
}

#[tokio::test]
async fn by_default_a_refusal_reuses_a_well_formed_id_or_generates_one() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = plain_service(limiter(), Arc::clone(&calls));
    for _ in 0..2 {
        let ok = svc
            .clone()
            .oneshot(request(Method::GET, "/v1/items"))
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
    }
    let kept = svc
        .clone()
        .oneshot(with_id(request(Method::GET, "/v1/items"), "trace-7"))
        .await
        .unwrap();
    assert_eq!(kept.status(), 429);
    assert_eq!(kept.headers()["x-request-id"], "trace-7");
    let body: serde_json::Value = serde_json::from_slice(kept.body()).unwrap();
    assert_eq!(body["request_id"], "trace-7");
    assert!(kept.extensions().get::<RateLimitOutcome>().is_none());

    let replaced = svc
        .clone()
        .oneshot(with_id(request(Method::GET, "/v1/items"), "bad id!"))
        .await
        .unwrap();
    assert_eq!(replaced.status(), 429);
    let id = replaced.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 32);
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    let body: serde_json::Value = serde_json::from_slice(replaced.body()).unwrap();
    assert_eq!(body["request_id"], id.as_str());
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn ids_on_every_response_replace_a_malformed_id_on_the_request_too() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(Arc::clone(&calls));
    let kept = svc
        .clone()
        .oneshot(with_id(request(Method::GET, "/v1/items"), "abc-123.x_y"))
        .await
        .unwrap();
    assert_eq!(kept.headers()["x-request-id"], "abc-123.x_y");
    assert_eq!(kept.headers()["x-handler-id"], "abc-123.x_y");
    let replaced = svc
        .clone()
        .oneshot(with_id(request(Method::GET, "/v1/items"), "<b>"))
        .await
        .unwrap();
    let id = replaced.headers()["x-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 32);
    assert_eq!(replaced.headers()["x-handler-id"], id);
}

#[test]
fn the_outcome_is_small_and_copy() {
    fn copy<T: Copy>() {}
    copy::<RateLimitOutcome>();
    assert!(std::mem::size_of::<RateLimitOutcome>() <= 40);
}

const RELOADED: &str = r#"
name: layer-test
identities: { capacity: 64 }
route_classes:
  read:
    burst:     { tokens: 3, per: 1s }
    sustained: { tokens: 100, per: 1h }
  write:
    mode: shadow
    burst:     { tokens: 1, per: 1s }
    sustained: { tokens: 100, per: 1h }
  special:
    burst:     { tokens: 1, per: 1s }
    sustained: { tokens: 100, per: 1h }
routes:
  - { method: GET,  path: "/v2/**",            class: read }
  - { method: POST, path: "/v1/things/*/run",  class: special }
  - { method: "*",  path: "/v1/**",            class: write }
"#;

async fn policy_of(svc: Svc, path: &str) -> Option<String> {
    let r = svc.oneshot(request(Method::GET, path)).await.unwrap();
    r.headers()
        .get("ratelimit-policy")
        .map(|v| v.to_str().unwrap().to_owned())
}

/// A reload changes the limits and the routes the layer applies, on the next request, on
/// every thread (each keeps its own compiled routes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_is_seen_by_the_layer_on_every_thread() {
    let limiter = limiter();
    let svc = plain_service(Arc::clone(&limiter), Arc::new(AtomicUsize::new(0)));
    let old = "\"burst\";q=2;w=1, \"sustained\";q=100;w=3600";
    let new = "\"burst\";q=3;w=1, \"sustained\";q=100;w=3600";
    // Warm the caches of both workers (and of this thread).
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            policy_of(svc, "/v2/items").await.is_none()
        }));
    }
    for t in tasks {
        assert!(t.await.unwrap(), "/v2 is not routed before the reload");
    }
    assert_eq!(
        policy_of(svc.clone(), "/v1/items").await.as_deref(),
        Some(old)
    );

    limiter
        .reload(Profile::from_yaml(RELOADED).unwrap())
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let svc = svc.clone();
        tasks.push(tokio::spawn(
            async move { policy_of(svc, "/v2/items").await },
        ));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().as_deref(), Some(new));
    }
    // `GET /v1/...` now falls to the shadowed `write` class.
    assert_eq!(
        policy_of(svc.clone(), "/v1/items").await.as_deref(),
        Some("\"burst\";q=1;w=1, \"sustained\";q=100;w=3600")
    );
}

/// Two layers over two limiters on one thread keep apart in the thread's cache.
#[tokio::test]
async fn layers_over_different_limiters_keep_their_own_routes() {
    let a = limiter();
    let b = Arc::new(
        Limiter::builder(Profile::from_yaml(RELOADED).unwrap())
            .build()
            .unwrap(),
    );
    let sa = plain_service(a, Arc::new(AtomicUsize::new(0)));
    let sb = plain_service(b, Arc::new(AtomicUsize::new(0)));
    for _ in 0..3 {
        assert!(policy_of(sa.clone(), "/v2/items").await.is_none());
        assert!(policy_of(sb.clone(), "/v2/items").await.is_some());
    }
}

#[tokio::test]
async fn an_async_backend_admits_through_the_waiting_future_with_options() {
    /// Answers after a yield, as a Redis backend does, from a real limiter.
    struct Slow(Arc<Limiter>);
    impl tollgate::tower::Admission for Slow {
        fn route_class(&self, name: &str) -> Option<tollgate::RouteClass> {
            self.0.route_class(name)
        }
        fn profile(&self) -> Arc<Profile> {
            self.0.profile()
        }
        async fn admit(&self, key: &tollgate::Key<'_>) -> Decision {
            tokio::task::yield_now().await;
            Limiter::admit(&self.0, key)
        }
        async fn admit_n(&self, key: &tollgate::Key<'_>, n: u32) -> Decision {
            tokio::task::yield_now().await;
            Limiter::admit_n(&self.0, key, n)
        }
        async fn admit_all(
            &self,
            items: &[(tollgate::Key<'_>, u32)],
        ) -> Result<(), tollgate::Refused> {
            tokio::task::yield_now().await;
            Limiter::admit_all(&self.0, items)
        }
    }
    let inner = service_fn(|req: Request<String>| {
        let seen = req.extensions().get::<RateLimitOutcome>().is_some();
        async move {
            let mut r = Response::new(Vec::new());
            r.headers_mut()
                .insert("x-saw-outcome", HeaderValue::from(u16::from(seen)));
            Ok::<_, Infallible>(r)
        }
    });
    let svc = RateLimitLayer::new(Slow(limiter()))
        .outcome_in_request()
        .outcome_in_response()
        .request_id_on_every_response()
        .layer(inner);
    let r = svc
        .clone()
        .oneshot(request(Method::GET, "/v1/items"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-saw-outcome"], "1");
    assert!(r.headers().get("x-request-id").is_some());
    assert!(r.headers().get("ratelimit-policy").is_some());
    assert_eq!(
        r.extensions().get::<RateLimitOutcome>().unwrap().decision,
        Decision::Admit
    );
}

const EXPOSED: &str = r#"
name: exposed
expose_remaining: true
identities: { capacity: 16 }
route_classes:
  read:
    burst:     { tokens: 4, per: 2s }
    sustained: { tokens: 100, per: 1h }
routes:
  - { method: GET, path: "/v1/**", class: read }
"#;

/// A layer over a limiter on a mock clock whose profile exposes the remaining tokens.
fn exposed() -> (Svc, Arc<tollgate::quanta::Mock>) {
    let (clock, mock) = tollgate::quanta::Clock::mock();
    let limiter = Limiter::builder(Profile::from_yaml(EXPOSED).unwrap())
        .clock(clock)
        .build()
        .unwrap();
    (plain_service(Arc::new(limiter), Arc::default()), mock)
}

async fn ratelimit_of(svc: &Svc) -> String {
    let r = svc
        .clone()
        .oneshot(request(Method::GET, "/v1/x"))
        .await
        .unwrap();
    r.headers()["ratelimit"].to_str().unwrap().to_owned()
}

#[tokio::test]
async fn ratelimit_t_counts_down_the_callers_own_buckets_on_the_mock_clock() {
    let (svc, mock) = exposed();
    // A burst token refills in 0.5 s, a sustained one in 36 s; `t` is the time to full, rounded up.
    assert_eq!(
        ratelimit_of(&svc).await,
        "\"burst\";r=3;t=1, \"sustained\";r=99;t=36"
    );
    assert_eq!(
        ratelimit_of(&svc).await,
        "\"burst\";r=2;t=1, \"sustained\";r=98;t=72"
    );
    assert_eq!(
        ratelimit_of(&svc).await,
        "\"burst\";r=1;t=2, \"sustained\";r=97;t=108"
    );
    mock.increment(std::time::Duration::from_millis(500));
    assert_eq!(
        ratelimit_of(&svc).await,
        "\"burst\";r=1;t=2, \"sustained\";r=96;t=144"
    );
    // Another caller's requests change nothing in this caller's header.
    let mut other = request(Method::GET, "/v1/x");
    other
        .extensions_mut()
        .insert(SocketAddr::from(([198, 51, 100, 7], 5555)));
    let r = svc.clone().oneshot(other).await.unwrap();
    assert_eq!(
        r.headers()["ratelimit"],
        "\"burst\";r=3;t=1, \"sustained\";r=99;t=36"
    );
    assert_eq!(
        ratelimit_of(&svc).await,
        "\"burst\";r=0;t=2, \"sustained\";r=95;t=180"
    );
}

fn legacy_of(r: &Response<Vec<u8>>) -> [Option<String>; 3] {
    [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ]
    .map(|n| r.headers().get(n).map(|v| v.to_str().unwrap().to_owned()))
}

#[tokio::test]
async fn legacy_headers_describe_the_callers_tightest_bucket_only_when_asked() {
    let (clock, mock) = tollgate::quanta::Clock::mock();
    let limiter = Arc::new(
        Limiter::builder(Profile::from_yaml(EXPOSED).unwrap())
            .clock(clock)
            .build()
            .unwrap(),
    );
    let inner = service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new(b"ok".to_vec()))
    });
    let svc = RateLimitLayer::new(Arc::clone(&limiter))
        .legacy_headers(true)
        .layer(inner);
    let some = |a: &str, b: &str, c: &str| [Some(a.into()), Some(b.into()), Some(c.into())];
    let r = svc
        .clone()
        .oneshot(request(Method::GET, "/v1/x"))
        .await
        .unwrap();
    assert_eq!(legacy_of(&r), some("4", "3", "1"));
    for _ in 0..3 {
        svc.clone()
            .oneshot(request(Method::GET, "/v1/x"))
            .await
            .unwrap();
    }
    let refused = svc
        .clone()
        .oneshot(request(Method::GET, "/v1/x"))
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(legacy_of(&refused), some("4", "0", "2"));
    mock.increment(std::time::Duration::from_secs(2));
    let r = svc
        .clone()
        .oneshot(request(Method::GET, "/v1/x"))
        .await
        .unwrap();
    assert_eq!(legacy_of(&r), some("4", "3", "1"));

    // Off by default.
    let (plain, _mock) = exposed();
    let r = plain.oneshot(request(Method::GET, "/v1/x")).await.unwrap();
    assert!(r.headers().get("ratelimit").is_some());
    assert_eq!(legacy_of(&r), [None, None, None]);
}

#[tokio::test]
async fn a_refusal_hook_shapes_the_response_and_tollgate_keeps_retry_after_and_the_id() {
    let inner = service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new(b"ok".to_vec()))
    });
    let svc = RateLimitLayer::new(limiter())
        .on_refusal(|cx| {
            let secs = cx.retry_after_secs?;
            let text = format!("slow down ({}): {secs}s", cx.request_id.as_str());
            Response::builder()
                .status(429)
                .header("content-type", "text/plain")
                .header("x-shaped", "yes")
                .header("retry-after", "999")
                .body(text.into_bytes())
                .ok()
        })
        .layer(inner);
    for _ in 0..2 {
        let r = svc
            .clone()
            .oneshot(request(Method::GET, "/v1/x"))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.body(), b"ok");
    }
    let r = svc
        .clone()
        .oneshot(with_id(request(Method::GET, "/v1/x"), "req-7"))
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["content-type"], "text/plain");
    assert_eq!(r.headers()["x-shaped"], "yes");
    // Tollgate's own Retry-After wins over the hook's, and the id is the caller's.
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(r.headers()["x-request-id"], "req-7");
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert!(r.headers().get("ratelimit-policy").is_some());
    assert_eq!(r.body(), b"slow down (req-7): 1s");
}

#[tokio::test]
async fn a_refusal_hook_that_declines_keeps_the_default_problem_response() {
    let inner = service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new(b"ok".to_vec()))
    });
    let svc = RateLimitLayer::new(limiter())
        .on_refusal(|_| None)
        .layer(inner);
    let mut last = None;
    for _ in 0..3 {
        last = Some(
            svc.clone()
                .oneshot(request(Method::GET, "/v1/x"))
                .await
                .unwrap(),
        );
    }
    let r = last.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert_eq!(r.headers()["retry-after"], "1");
    let body: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!(body["status"], 429);
}
