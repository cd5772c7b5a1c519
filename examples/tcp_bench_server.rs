//! The server `benches/http_tcp.sh` drives with wrk: one axum route (`GET /v1/items`, 52 bytes
//! of JSON, the same handler as `benches/http_layer.rs`) on a one-thread tokio runtime, bare or
//! behind a rate-limit layer with a quota that never refuses.
//!
//! `cargo run --release --example tcp_bench_server -- bare|tollgate|governor [ADDR]`
//! (default address `127.0.0.1:8099`). Runs until killed.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use tollgate::http::PeerExtractor;
use tollgate::tower::RateLimitLayer;
use tollgate::{Limiter, Profile};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

/// Quotas so large that every request is admitted: the layer's admit path is what is measured.
const PROFILE: &str = "name: tcp-bench
identities: { capacity: 65536 }
route_classes:
  read:
    burst: { tokens: 4000000000, per: 1s }
    sustained: { tokens: 4000000000, per: 1s }
routes:
  - { method: GET, path: \"/v1/**\", class: read }
";

fn app() -> Router {
    Router::new().route(
        "/v1/items",
        get(|| async {
            axum::Json(
                serde_json::json!({"items": [{"id": 1, "name": "one"}], "next": null, "n": 10}),
            )
        }),
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let variant = args.next().unwrap_or_default();
    let addr: SocketAddr = args.next().as_deref().unwrap_or("127.0.0.1:8099").parse()?;
    let app = match variant.as_str() {
        "bare" => app(),
        "tollgate" => {
            let limiter = Arc::new(Limiter::builder(Profile::from_yaml(PROFILE)?).build()?);
            let extractor = PeerExtractor::new()
                .peer_addr_from(|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0));
            app().layer(RateLimitLayer::with_extractor(limiter, extractor))
        }
        "governor" => {
            // Keyed by peer IP; one token a nanosecond and the largest burst: never refuses.
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .finish()
                .ok_or("governor config")?;
            app().layer(GovernorLayer::new(config))
        }
        other => {
            return Err(format!("unknown variant {other:?}: bare, tollgate or governor").into())
        }
    };
    // One thread does everything (accept, parse, handle, write): the cost per request is what
    // that one core can do.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        eprintln!("tcp_bench_server: {variant} on {addr}");
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    })?;
    Ok(())
}
