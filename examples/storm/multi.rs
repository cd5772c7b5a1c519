//! Servers sharing one Redis (`redis` feature): each with its own `RedisLimiter`, so that one
//! identity's buckets are one global limit whichever server a client reaches.
//!
//! The gateway's router takes the embedded `Limiter`, so these servers are the same shape
//! built over any `Admission`: bearer authentication for the storm's one token, tollgate's
//! `RateLimitLayer`, `GET` and `POST /v1/items`, and the storm's fault layer outermost.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use http::header::AUTHORIZATION;
use http::StatusCode;
use tollgate::http::VerifiedIdentity;
use tollgate::redis::RedisLimiter;
use tollgate::tower::RateLimitLayer;
use tollgate::Profile;

use crate::faults::{fault_layer, Faults};

/// The one token these servers know: acme / alice, as in `examples/tokens.yaml`.
pub const TOKEN: &str = "acme-alice-token";

/// Starts `n` servers on `127.0.0.1:0`, each with its own `RedisLimiter` on `url` (key prefix
/// `prefix`, so that runs do not share state), all behind `faults`.
pub async fn start_servers(
    url: &str,
    prefix: &str,
    profile: &Profile,
    n: usize,
    faults: Arc<Faults>,
) -> Vec<SocketAddr> {
    let mut addrs = Vec::with_capacity(n);
    for _ in 0..n {
        let limiter = RedisLimiter::builder(url, profile.clone())
            .key_prefix(prefix)
            .connect()
            .await
            .unwrap_or_else(|e| panic!("RedisLimiter on {url}: {e}"));
        let router = Router::new()
            .route(
                "/v1/items",
                get(|| async { Json(serde_json::json!({ "items": [] })) }).post(|| async {
                    (
                        StatusCode::CREATED,
                        Json(serde_json::json!({ "created": true })),
                    )
                }),
            )
            .layer(RateLimitLayer::new(Arc::new(limiter)))
            .layer(middleware::from_fn(authenticate))
            .layer(middleware::from_fn_with_state(faults.clone(), fault_layer));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        addrs.push(listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            axum::serve(
                listener,
                router.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .expect("serve")
        });
    }
    addrs
}

/// The storm's token is acme / alice; anything else is a 401.
async fn authenticate(mut req: Request, next: Next) -> Response {
    let bearer = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer != Some(TOKEN) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let id = VerifiedIdentity::new("acme", "alice").expect("a valid identity");
    req.extensions_mut().insert(id);
    next.run(req).await
}
