//! The demo gateway's router, shared by `main.rs` and the tests (which include this file with
//! `#[path = "../examples/gateway/app.rs"] mod app;` and serve it on `127.0.0.1:0`).
//!
//! Layers, outermost first: outcome counters, bearer-token authentication (inserts the
//! `VerifiedIdentity`; no token is the anonymous class; an unknown token is 401), then
//! tollgate's `RateLimitLayer`, then the handlers.

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
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Deserialize;
use serde_json::{json, Value};
use tollgate::http::{RequestId, PROBLEM_JSON, X_REQUEST_ID};
use tollgate::tower::{Cidr, PeerExtractor, RateLimitLayer, RateLimitOutcome, VerifiedIdentity};
use tollgate::{Decision, Limiter, Profile};

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
#[derive(Clone)]
pub struct AppState {
    limiter: Arc<Limiter>,
    metrics: Option<PrometheusHandle>,
}

/// The gateway's router. `trusted_proxies` are the networks whose `Forwarded` /
/// `X-Forwarded-For` are believed; `metrics` renders `GET /metrics` (404 without it).
/// Serve it with `into_make_service_with_connect_info::<SocketAddr>()`.
pub fn router(
    limiter: Arc<Limiter>,
    tokens: Tokens,
    trusted_proxies: Vec<Cidr>,
    metrics: Option<PrometheusHandle>,
) -> Router {
    let extractor = PeerExtractor::new()
        .trust_proxies(trusted_proxies)
        .peer_addr_from(|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0));
    let rate_limit = RateLimitLayer::new(Arc::clone(&limiter)).extractor(extractor);
    let tokens = Arc::new(tokens);
    Router::new()
        .route("/v1/items", get(list_items).post(create_item))
        .route("/v1/register", post(register))
        .route("/v1/reports/run", post(run_report))
        .route("/.well-known/rate-limits", get(discovery))
        .route("/metrics", get(render_metrics))
        .layer(rate_limit)
        .layer(middleware::from_fn_with_state(tokens, authenticate))
        .layer(middleware::from_fn(count_outcomes))
        .with_state(AppState { limiter, metrics })
}

/// `Authorization: Bearer <token>`: a known token inserts its identity; no header is the
/// anonymous class; anything else is 401.
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
        None => unauthorized(&RequestId::from_headers(req.headers())),
    }
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

/// Counts every rate-limited response by route class and outcome (`tollgate_http_requests_total`).
async fn count_outcomes(req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    if let Some(o) = response.extensions().get::<RateLimitOutcome>() {
        let outcome = match o.decision {
            Decision::Admit => "admit",
            Decision::Throttle { .. } => "throttle",
            Decision::Unavailable { .. } => "unavailable",
        };
        metrics::counter!(
            "tollgate_http_requests_total",
            "route_class" => o.class_name.to_string(),
            "outcome" => outcome,
            "enforced" => if o.enforced { "true" } else { "false" },
        )
        .increment(1);
    }
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

async fn discovery(State(state): State<AppState>) -> Json<Value> {
    Json(discovery_document(&state.limiter))
}

async fn render_metrics(State(state): State<AppState>) -> Response {
    match &state.metrics {
        Some(handle) => (
            [(CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The discovery document served at `GET /.well-known/rate-limits`: per route class the burst
/// and sustained limits, the routes, the Retry-After cap, the catalog codes and the capacity
/// window. No usage figures and nothing about any tenant.
///
/// Built from the profile here until the core's `Limiter::published_limits()` lands; then this
/// becomes `serde_json::to_value(limiter.published_limits())`.
pub fn discovery_document(limiter: &Limiter) -> Value {
    let p = limiter.profile();
    let bucket = |b: &tollgate::BucketLimit| json!({ "tokens": b.tokens.0, "per_seconds": b.per.0.as_secs_f64() });
    let classes: serde_json::Map<String, Value> = p
        .route_classes
        .iter()
        .map(|(name, l)| {
            (
                name.to_owned(),
                json!({ "burst": bucket(&l.burst), "sustained": bucket(&l.sustained) }),
            )
        })
        .collect();
    let routes: Vec<Value> = p
        .routes
        .iter()
        .map(|r| json!({ "method": r.method, "path": r.path, "class": r.class }))
        .collect();
    let catalog = |c: &tollgate::CatalogCode| json!({ "code": c.code, "type": c.type_uri });
    json!({
        "profile": p.name,
        "route_classes": classes,
        "routes": routes,
        "retry_after": { "max_seconds": p.retry_after.max.0.as_secs() },
        "catalog": {
            "throttled": catalog(&p.catalog.throttled),
            "over_capacity": catalog(&p.catalog.over_capacity),
            "limiter_unavailable": catalog(&p.catalog.limiter_unavailable),
        },
        "capacity_window_seconds": p.shared_capacity.as_ref().map(|c| c.window.0.as_secs_f64()),
    })
}

/// Reads `path` and puts it in force without losing bucket state. A bad profile is refused
/// with its error and the old one stays.
pub fn reload(limiter: &Limiter, path: &Path) -> Result<(), String> {
    let profile = Profile::from_path(path).map_err(|e| e.to_string())?;
    apply_profile(limiter, profile)
}

/// The one call to switch to `limiter.reload(profile)` when the core has it.
fn apply_profile(limiter: &Limiter, profile: Profile) -> Result<(), String> {
    let _ = (limiter, profile);
    Err(
        "the profile is valid, but this build of tollgate cannot swap limits yet \
         (Limiter::reload is not in the core); restart to apply it"
            .to_owned(),
    )
}
