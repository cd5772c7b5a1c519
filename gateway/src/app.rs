//! The demo gateway's routers, for its binary and its tests (which serve them on `127.0.0.1:0`).
//!
//! Layers, outermost first: bearer-token authentication (a known token inserts its
//! `VerifiedIdentity`; no token is the anonymous class), tollgate's `RateLimitLayer`, the
//! rejection of unknown tokens (401), then the handlers. Unknown tokens are refused *after*
//! rate limiting, so that guessing tokens is charged to the guesser's anonymous class.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Deserialize;
use serde_json::{json, Value};
use tollgate::http::admin::{AdminToken, ProfileAdmin, ProfileTarget, ReloadRefusal};
use tollgate::http::{
    Cidr, PeerExtractor, RequestId, VerifiedIdentity, PROBLEM_JSON, X_REQUEST_ID,
};
use tollgate::tower::RateLimitLayer;
use tollgate::Profile;

use crate::backend::Backend;

/// Bearer token to verified identity, from a small YAML file:
/// `tokens: { <token>: { tenant: acme, principal: alice } }`.
#[derive(Clone, Debug, Default)]
pub struct Tokens(HashMap<String, VerifiedIdentity>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    tokens: HashMap<String, TokenEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    tenant: String,
    principal: String,
}

impl Tokens {
    /// Parses and checks the token file's text.
    pub fn from_yaml(src: &str) -> Result<Tokens, String> {
        let file: TokenFile =
            serde_yaml_ng::from_str(src).map_err(|e| format!("invalid token file: {e}"))?;
        let mut map = HashMap::with_capacity(file.tokens.len());
        for (token, e) in file.tokens {
            let id = VerifiedIdentity::new(&e.tenant, &e.principal)
                .map_err(|err| format!("invalid token file: a token's identity: {err}"))?;
            map.insert(token, id);
        }
        Ok(Tokens(map))
    }

    /// Reads the token file.
    pub fn from_path(path: &Path) -> Result<Tokens, String> {
        let src = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Tokens::from_yaml(&src)
    }

    fn verify(&self, token: &str) -> Option<&VerifiedIdentity> {
        self.0.get(token)
    }
}

/// What the handlers share.
pub struct AppState<B> {
    limiter: Arc<B>,
}

impl<B> Clone for AppState<B> {
    fn clone(&self) -> Self {
        AppState {
            limiter: Arc::clone(&self.limiter),
        }
    }
}

/// The gateway's public router. `trusted_proxies` are the networks whose `Forwarded` /
/// `X-Forwarded-For` are believed. Serve it with `serve::serve` (or with
/// `into_make_service_with_connect_info::<SocketAddr>()`). Metrics are not here: they are global
/// counts, for operators, on [`operator_router`]'s own listener.
pub fn router<B: Backend>(limiter: Arc<B>, tokens: Tokens, trusted_proxies: Vec<Cidr>) -> Router {
    let extractor = PeerExtractor::new()
        .trust_proxies(trusted_proxies)
        .peer_addr_from(|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0));
    // Ids on every response: the 401 below and the handlers' logs use the layer's id.
    let rate_limit = RateLimitLayer::with_extractor(Arc::clone(&limiter), extractor)
        .request_id_on_every_response();
    let tokens = Arc::new(tokens);
    Router::new()
        .route("/v1/items", get(list_items).post(create_item))
        .route("/v1/register", post(register))
        .route("/v1/reports/run", post(run_report))
        .route("/.well-known/rate-limits", get(discovery::<B>))
        .layer(middleware::from_fn(reject_unknown_tokens))
        .layer(rate_limit)
        .layer(middleware::from_fn_with_state(tokens, authenticate))
        .with_state(AppState { limiter })
}

/// The operators' router, for a listener of its own (loopback by default): `GET /metrics` in
/// Prometheus text. Kept off the public listener because the counts are global: by class and
/// cause over every tenant, which no caller should read about its neighbours.
pub fn operator_router(metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .with_state(metrics)
}

/// The admin routes (`GET`/`PUT /admin/profile`, see [`tollgate::http::admin`]) over
/// `limiter`, for callers with `token`, to merge into the operators' router: accepted profiles
/// are written to `save_to` when given; only loopback peers are answered unless `remote`.
pub fn admin_router<B: Backend>(
    limiter: Arc<B>,
    token: AdminToken,
    save_to: Option<std::path::PathBuf>,
    remote: bool,
) -> Router {
    let admin = ProfileAdmin::new(limiter, token, save_to, remote).program("gateway");
    tollgate_ops::admin::router(Arc::new(admin))
}

/// Histogram buckets of every `*_seconds` metric, in seconds: from the 1-second floor of
/// `Retry-After` to the 1-hour cap, so that `histogram_quantile` over
/// `tollgate_retry_after_seconds_bucket` shows the distribution (the dashboard's panel).
pub const SECONDS_BUCKETS: [f64; 12] = [
    0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0,
];

/// The Prometheus recorder the gateway installs: histograms with [`SECONDS_BUCKETS`] (the
/// exporter's default would render them as summaries, which cannot be aggregated).
pub fn prometheus() -> PrometheusBuilder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)
        .expect("the buckets are not empty")
}

/// Marks a request whose `Authorization` header is present but not a known bearer token.
#[derive(Clone, Copy)]
struct UnknownToken;

/// `Authorization: Bearer <token>`: a known token inserts its identity; no header is the
/// anonymous class; anything else is marked, rate-limited as anonymous, then refused (401).
async fn authenticate(State(tokens): State<Arc<Tokens>>, mut req: Request, next: Next) -> Response {
    let Some(value) = req.headers().get(AUTHORIZATION) else {
        return next.run(req).await;
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match token.and_then(|t| tokens.verify(t)) {
        Some(id) => {
            let id = id.clone();
            req.extensions_mut().insert(id);
            next.run(req).await
        }
        None => {
            req.extensions_mut().insert(UnknownToken);
            next.run(req).await
        }
    }
}

async fn reject_unknown_tokens(req: Request, next: Next) -> Response {
    if req.extensions().get::<UnknownToken>().is_some() {
        // The rate limit layer already put a well-formed id on the request.
        return unauthorized(&RequestId::from_headers(req.headers()));
    }
    next.run(req).await
}

fn unauthorized(request_id: &RequestId) -> Response {
    let body = json!({
        "type": "about:blank",
        "title": "Unauthorized",
        "status": 401,
        "detail": "The bearer token is not valid.",
        "code": "unauthorized",
        "request_id": request_id.as_str(),
    });
    let mut response = (StatusCode::UNAUTHORIZED, body.to_string()).into_response();
    let h = response.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    h.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    h.insert(X_REQUEST_ID, request_id.header_value().clone());
    response
}

async fn list_items() -> Json<Value> {
    Json(json!({ "items": [] }))
}

async fn create_item() -> (StatusCode, Json<Value>) {
    (StatusCode::CREATED, Json(json!({ "created": true })))
}

async fn register() -> (StatusCode, Json<Value>) {
    (StatusCode::CREATED, Json(json!({ "registered": true })))
}

async fn run_report() -> (StatusCode, Json<Value>) {
    (StatusCode::ACCEPTED, Json(json!({ "report": "queued" })))
}

async fn discovery<B: Backend>(State(state): State<AppState<B>>) -> Json<Value> {
    Json(discovery_document(&*state.limiter))
}

async fn render_metrics(State(metrics): State<PrometheusHandle>) -> Response {
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics.render(),
    )
        .into_response()
}

/// The discovery document served at `GET /.well-known/rate-limits`: the core's published
/// limits (per route class its buckets, mode and routes; the Retry-After cap; the catalog; the
/// capacity window). No usage figures and nothing about any tenant.
pub fn discovery_document<B: Backend>(limiter: &B) -> Value {
    serde_json::to_value(limiter.published_limits()).expect("the published limits serialize")
}

/// Reads `path` and puts it in force without losing bucket state. A bad profile is refused
/// with its error and the old one stays.
pub fn reload<B: Backend>(limiter: &B, path: &Path) -> Result<(), String> {
    let profile = Profile::from_path(path).map_err(|e| e.to_string())?;
    ProfileTarget::reload(limiter, profile).map_err(|e| match e {
        ReloadRefusal::Profile(e) => e.to_string(),
        ReloadRefusal::Invalid(detail) => detail,
    })
}
