//! What a rate-limit layer adds per request: the same axum handler through
//! `tower::ServiceExt::oneshot`, bare, with tower_governor 0.8's `GovernorLayer` (keyed by peer
//! IP, from axum's `ConnectInfo`) and with tollgate's `RateLimitLayer` (anonymous, keyed by the
//! same peer address; and authenticated),
//! side by side in one group so that the ratios are read off one run.
//!
//! `cargo bench --bench http_layer -- --measurement-time 5 --warm-up-time 2`. Targets: the layer
//! adds at most 150 ns to bare axum, and at most 0.75x what tower_governor adds in the same run.
//! Quotas are so large that every request takes the admit path (decision, policy header),
//! which is the common case and the one that reaches the handler.
//!
//! The group `http_layer_two_threads` sends requests from two OS threads at once through one
//! shared router, each thread its own caller (peer address or identity), and reports wall time
//! per request: what a layer's writes to a cache line both threads share (a reference count
//! bumped by axum's clone of the route's service for every request) cost under contention,
//! which one thread never shows. Each thread calls its own clone of the router (`Service::call`
//! on `&mut`, as hyper does per connection), so that the router's own reference count stays out.
//! Its `service_clone` pair times that per-request clone alone (and its drop), counted and after
//! `RateLimitLayer::leak`, the layer's share of the contended line without the rest of axum.

use std::future::Future;
use std::hint::black_box;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::Request;
use tollgate::http::{PeerExtractor, VerifiedIdentity};
use tollgate::tower::RateLimitLayer;
use tollgate::{Limiter, Profile};
use tower::{Layer, Service, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

fn limiter() -> Arc<Limiter> {
    let profile = Profile::from_yaml(
        "name: bench\nidentities: { capacity: 65536 }\nroute_classes:\n  read:\n    \
         burst: { tokens: 4000000000, per: 1s }\n    sustained: { tokens: 4000000000, per: 1s }\n\
         routes:\n  - { method: GET, path: \"/v1/**\", class: read }\n",
    )
    .unwrap();
    Arc::new(Limiter::builder(profile).build().unwrap())
}

/// One GET answering 52 bytes of JSON. `with_state` turns the handler into a route once, as
/// `axum::serve` does (`into_make_service`); without it a bare router would build the route
/// again on every request, and look slower than the same router with a layer.
fn app() -> Router {
    Router::new()
        .route(
            "/v1/items",
            get(|| async {
                axum::Json(
                    serde_json::json!({"items": [{"id": 1, "name": "one"}], "next": null, "n": 10}),
                )
            }),
        )
        .with_state(())
}

fn request(identity: Option<&VerifiedIdentity>) -> Request<Body> {
    request_from([192, 0, 2, 1], identity)
}

fn request_from(peer: [u8; 4], identity: Option<&VerifiedIdentity>) -> Request<Body> {
    let mut req = Request::get("/v1/items").body(Body::empty()).unwrap();
    // The peer address as `axum::serve` puts it there (`into_make_service_with_connect_info`).
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((peer, 40000))));
    if let Some(id) = identity {
        req.extensions_mut().insert(id.clone());
    }
    req
}

fn http_layer(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let bare = app();
    let extractor =
        PeerExtractor::new().peer_addr_from(|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0));
    let layer = RateLimitLayer::with_extractor(limiter(), extractor);
    let limited = app().layer(layer.clone());
    // `RateLimitLayer::leak`: the services' clones copy a pointer instead of counting.
    let leaked = app().layer(layer.clone().leak());
    // Keyed by peer IP (the `SocketAddr` extension); one token a nanosecond and the largest
    // burst: a quota that never refuses.
    let governor_config = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .finish()
        .unwrap();
    let governed = app().layer(GovernorLayer::new(governor_config));
    let alice = VerifiedIdentity::new("acme", "alice").unwrap();

    // Every contender answers the handler's 200 and its 52 bytes (none refuses, none fails).
    for app in [&bare, &governed, &limited, &leaked] {
        let r = rt.block_on(app.clone().oneshot(request(None))).unwrap();
        assert_eq!(r.status(), 200, "{:?}", r.headers());
        let body = rt
            .block_on(axum::body::to_bytes(r.into_body(), 1024))
            .unwrap();
        assert_eq!(body.len(), 52);
    }

    let mut g = c.benchmark_group("http_layer");
    g.throughput(Throughput::Elements(1));
    g.bench_function("axum", |b| {
        b.iter(|| rt.block_on(bare.clone().oneshot(black_box(request(None)))))
    });
    g.bench_function("axum+tower_governor", |b| {
        b.iter(|| rt.block_on(governed.clone().oneshot(black_box(request(None)))))
    });
    g.bench_function("axum+tollgate/anonymous", |b| {
        b.iter(|| rt.block_on(limited.clone().oneshot(black_box(request(None)))))
    });
    g.bench_function("axum+tollgate/authenticated", |b| {
        b.iter(|| rt.block_on(limited.clone().oneshot(black_box(request(Some(&alice))))))
    });
    g.bench_function("axum+tollgate/anonymous,leaked", |b| {
        b.iter(|| rt.block_on(leaked.clone().oneshot(black_box(request(None)))))
    });
    // The per-request service clone alone, on one thread: what `http_layer_two_threads`'s pair
    // costs without a second core writing the same line.
    let handler = tower::service_fn(|_: Request<Body>| async {
        Ok::<_, std::convert::Infallible>(axum::response::Response::new(Body::empty()))
    });
    for (name, svc) in [
        ("service_clone/counted", layer.clone().layer(handler)),
        ("service_clone/leaked", layer.clone().leak().layer(handler)),
    ] {
        g.bench_function(name, |b| b.iter(|| drop(black_box(svc.clone()))));
    }
    g.finish();
}

/// Polls `future` once: every contender answers at once (the handler, the decisions and the
/// layers' futures never wait), so no runtime is needed, and none adds shared state of its own.
fn ready<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("a contender's future waited"),
    }
}

/// Wall time of `iters` requests from each of two threads at once, per request: thread `t`
/// calls its own clone of `app` with `make(t)` (its own caller).
fn two_threads(app: &Router, iters: u64, make: impl Fn(usize) -> Request<Body> + Sync) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..2 {
            let (mut app, make) = (app.clone(), &make);
            s.spawn(move || {
                for _ in 0..iters {
                    let response = ready(app.call(black_box(make(t)))).unwrap();
                    debug_assert_eq!(response.status(), 200);
                    black_box(response);
                }
            });
        }
    });
    start.elapsed() / 2
}

fn http_layer_two_threads(c: &mut Criterion) {
    let bare = app();
    let extractor =
        PeerExtractor::new().peer_addr_from(|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0));
    let layer = RateLimitLayer::with_extractor(limiter(), extractor);
    let limited = app().layer(layer.clone());
    let leaked = app().layer(layer.clone().leak());
    let governor_config = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .finish()
        .unwrap();
    let governed = app().layer(GovernorLayer::new(governor_config));
    // Distinct callers: two peers in distinct networks (the anonymous class groups by prefix),
    // two principals.
    let peers = [[192, 0, 2, 1], [198, 51, 100, 1]];
    let ids = [
        VerifiedIdentity::new("acme", "alice").unwrap(),
        VerifiedIdentity::new("acme", "bob").unwrap(),
    ];
    for app in [&bare, &governed, &limited, &leaked] {
        let r = ready(app.clone().call(request_from(peers[1], Some(&ids[1])))).unwrap();
        assert_eq!(r.status(), 200, "{:?}", r.headers());
    }

    let mut g = c.benchmark_group("http_layer_two_threads");
    g.throughput(Throughput::Elements(1));
    g.bench_function("axum", |b| {
        b.iter_custom(|n| two_threads(&bare, n, |t| request_from(peers[t], None)))
    });
    g.bench_function("axum+tower_governor", |b| {
        b.iter_custom(|n| two_threads(&governed, n, |t| request_from(peers[t], None)))
    });
    g.bench_function("axum+tollgate/anonymous", |b| {
        b.iter_custom(|n| two_threads(&limited, n, |t| request_from(peers[t], None)))
    });
    g.bench_function("axum+tollgate/authenticated", |b| {
        b.iter_custom(|n| two_threads(&limited, n, |t| request_from(peers[t], Some(&ids[t]))))
    });
    g.bench_function("axum+tollgate/anonymous,leaked", |b| {
        b.iter_custom(|n| two_threads(&leaked, n, |t| request_from(peers[t], None)))
    });
    // The per-request clone alone (what axum's `Route::oneshot_inner` does), with a handler
    // whose clone writes nothing: the layer's own share of the contended line.
    let handler = tower::service_fn(|_: Request<Body>| async {
        Ok::<_, std::convert::Infallible>(axum::response::Response::new(Body::empty()))
    });
    for (name, svc) in [
        ("service_clone/counted", layer.clone().layer(handler)),
        ("service_clone/leaked", layer.clone().leak().layer(handler)),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|n| {
                let start = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..2 {
                        let svc = &svc;
                        s.spawn(move || (0..n).for_each(|_| drop(black_box(svc.clone()))));
                    }
                });
                start.elapsed() / 2
            })
        });
    }
    g.finish();
}

criterion_group!(benches, http_layer, http_layer_two_threads);
criterion_main!(benches);
