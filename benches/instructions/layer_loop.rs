//! One variant of `benches/http_layer.rs` in a loop, for callgrind (`benches/layer_instructions.sh`):
//! `layer_loop bare|noop|tollgate|tollgate-leaked|governor|governor-headers N` sends N requests
//! through `oneshot` on a current-thread runtime, with the same router, request and quotas as the
//! criterion bench. `noop` is a layer that does nothing (a `MapRequestLayer` of the identity):
//! what axum's `Router::layer` costs whatever the layer, so that each layer's own work can be
//! told from it.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use http::Request;
use tollgate::http::PeerExtractor;
use tollgate::tower::RateLimitLayer;
use tollgate::{Limiter, Profile};
use tower::ServiceExt;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

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

fn main() {
    let mut args = std::env::args().skip(1);
    let variant = args
        .next()
        .expect("bare|noop|tollgate|tollgate-leaked|governor|governor-headers");
    let n: u64 = args.next().expect("N").parse().expect("N");
    let app = match variant.as_str() {
        "bare" => app(),
        "noop" => app().layer(tower::util::MapRequestLayer::new(|r: Request<Body>| r)),
        "tollgate" | "tollgate-leaked" => {
            let profile = Profile::from_yaml(
                "name: bench\nidentities: { capacity: 65536 }\nroute_classes:\n  read:\n    \
                 burst: { tokens: 4000000000, per: 1s }\n    sustained: { tokens: 4000000000, per: 1s }\n\
                 routes:\n  - { method: GET, path: \"/v1/**\", class: read }\n",
            )
            .unwrap();
            let limiter = Arc::new(Limiter::builder(profile).build().unwrap());
            let extractor = PeerExtractor::new()
                .peer_addr_from(|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0));
            let layer = RateLimitLayer::with_extractor(limiter, extractor);
            // `RateLimitLayer::leak`: a service clone copies a pointer instead of counting.
            app().layer(if variant == "tollgate" { layer } else { layer.leak() })
        }
        "governor" => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .finish()
                .unwrap();
            app().layer(GovernorLayer::new(config))
        }
        // With `use_headers`: `x-ratelimit-limit` and `x-ratelimit-remaining` on every
        // admitted response, as tollgate's layer puts `RateLimit-Policy` on each.
        "governor-headers" => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .use_headers()
                .finish()
                .unwrap();
            app().layer(GovernorLayer::new(config))
        }
        other => panic!("unknown variant {other}"),
    };
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    assert_eq!(send_requests(&app, &rt, n), n, "every request admitted");
}

/// The part callgrind counts (`--toggle-collect`): start-up stays out, above all the clock's
/// calibration, whose length varies from run to run (by tens of instructions per request at
/// N = 20000 when it was counted). Returns how many requests were answered 200.
#[inline(never)]
fn send_requests(app: &Router, rt: &tokio::runtime::Runtime, n: u64) -> u64 {
    let mut ok = 0u64;
    for _ in 0..n {
        let mut req = Request::get("/v1/items").body(Body::empty()).unwrap();
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from(([192, 0, 2, 1], 40000))));
        let r = rt.block_on(app.clone().oneshot(req)).unwrap();
        ok += u64::from(r.status() == 200);
    }
    ok
}
