//! What `RateLimitLayer` adds per request: the same axum handler through
//! `tower::ServiceExt::oneshot`, without and with the layer, side by side in one group.
//!
//! `cargo bench --bench http_layer --features tower`. Target: the layer adds at most 1 µs per
//! request. Quotas are so large that every request takes the admit path (decision, policy
//! headers, request id), which is the common case and the one that reaches the handler.

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::Request;
use tollgate::http::VerifiedIdentity;
use tollgate::tower::RateLimitLayer;
use tollgate::{Limiter, Profile};
use tower::ServiceExt;

fn limiter() -> Arc<Limiter> {
    let profile = Profile::from_yaml(
        "name: bench\nidentities: { capacity: 65536 }\nroute_classes:\n  read:\n    \
         burst: { tokens: 4000000000, per: 1s }\n    sustained: { tokens: 4000000000, per: 1s }\n\
         routes:\n  - { method: GET, path: \"/v1/**\", class: read }\n",
    )
    .unwrap();
    Arc::new(Limiter::builder(profile).build().unwrap())
}

fn app() -> Router {
    Router::new().route("/v1/items", get(|| async { "[]" }))
}

fn request(identity: Option<&VerifiedIdentity>) -> Request<Body> {
    let mut req = Request::get("/v1/items").body(Body::empty()).unwrap();
    req.extensions_mut()
        .insert(SocketAddr::from(([192, 0, 2, 1], 40000)));
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
    let limited = app().layer(RateLimitLayer::new(limiter()));
    let alice = VerifiedIdentity::new("acme", "alice").unwrap();

    let mut g = c.benchmark_group("http_layer");
    g.throughput(Throughput::Elements(1));
    g.bench_function("axum", |b| {
        b.iter(|| rt.block_on(bare.clone().oneshot(black_box(request(None)))))
    });
    g.bench_function("axum+tollgate/anonymous", |b| {
        b.iter(|| rt.block_on(limited.clone().oneshot(black_box(request(None)))))
    });
    g.bench_function("axum+tollgate/authenticated", |b| {
        b.iter(|| rt.block_on(limited.clone().oneshot(black_box(request(Some(&alice))))))
    });
    g.finish();
}

criterion_group!(benches, http_layer);
criterion_main!(benches);
