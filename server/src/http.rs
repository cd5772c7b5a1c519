//! The HTTP side on `--http`: `GET /healthz`, `GET /.well-known/rate-limits` (the discovery
//! document), `GET /metrics` (Prometheus text) and `POST /json` (a `RateLimitRequest` as JSON,
//! for clients without gRPC, as envoyproxy/ratelimit serves it).
//!
//! `/metrics` counts every tenant's decisions: keep this listener for operators (it binds to
//! loopback by default).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use tonic::Code;

use crate::backend::Backend;
use crate::decide::RateLimiter;
use crate::json::{JsonRequest, JsonResponse};

/// The largest `POST /json` body, in bytes.
pub const MAX_JSON_BODY: usize = 256 * 1024;

struct Shared<B> {
    limiter: Arc<RateLimiter<B>>,
    metrics: Option<PrometheusHandle>,
}

/// The HTTP routes over `limiter`; `/metrics` answers 404 without a Prometheus handle.
pub fn router<B: Backend>(
    limiter: Arc<RateLimiter<B>>,
    metrics: Option<PrometheusHandle>,
) -> Router {
    let shared = Arc::new(Shared { limiter, metrics });
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/.well-known/rate-limits", get(discovery::<B>))
        .route("/metrics", get(prometheus::<B>))
        .route("/json", post(json::<B>))
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .with_state(shared)
}

async fn discovery<B: Backend>(State(s): State<Arc<Shared<B>>>) -> Response {
    Json(s.limiter.backend().published_limits()).into_response()
}

async fn prometheus<B: Backend>(State(s): State<Arc<Shared<B>>>) -> Response {
    match &s.metrics {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `POST /json`: 200 with the response for OK, 429 for OVER_LIMIT; a refused request gets
/// `{"code", "message"}` with 400 (malformed), 403 (domain or descriptor refused) or 503
/// (capacity or store).
async fn json<B: Backend>(
    State(s): State<Arc<Shared<B>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let refuse = |status: StatusCode, code: &str, message: String| {
        (
            status,
            Json(serde_json::json!({ "code": code, "message": message })),
        )
            .into_response()
    };
    let req = match serde_json::from_slice::<JsonRequest>(&body) {
        Ok(r) => r,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                format!("not a RateLimitRequest: {e}"),
            )
        }
    };
    let Some(req) = req.into_proto() else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "hitsAddend is more than 4294967295".into(),
        );
    };
    let id = headers.get("x-request-id").and_then(|v| v.to_str().ok());
    match s.limiter.should_rate_limit(&req, id).await {
        Ok(r) => {
            let status = if r.overall_code == 2 {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (status, Json(JsonResponse::from(&r))).into_response()
        }
        Err(e) => {
            let status = match e.code() {
                Code::InvalidArgument => StatusCode::BAD_REQUEST,
                Code::NotFound | Code::PermissionDenied => StatusCode::FORBIDDEN,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            refuse(status, code_name(e.code()), e.message().to_owned())
        }
    }
}

/// The gRPC status code as its proto name.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::NotFound => "NOT_FOUND",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::Unavailable => "UNAVAILABLE",
        _ => "UNKNOWN",
    }
}
