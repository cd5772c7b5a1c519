//! The admin routes (`GET` / `PUT /admin/profile`) on axum: the engine's
//! [`tollgate::http::admin::ProfileAdmin`] (the rules: token, loopback, `If-Match`, saving the
//! file) over any [`ProfileTarget`], mounted once for the gateway and `tollgate-server`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{ConnectInfo, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use tollgate::http::admin::{ProfileAdmin, ProfileTarget};

/// `GET` and `PUT /admin/profile` over `admin`, to merge into an operators' router (served by
/// [`crate::serve`], which gives the handler the peer's address).
pub fn router<T: ProfileTarget + Send + Sync + 'static>(admin: Arc<ProfileAdmin<T>>) -> Router {
    Router::new()
        .route("/admin/profile", any(profile::<T>))
        .with_state(admin)
}

/// The engine's route: the peer from `ConnectInfo`, the body read up to the route's limit.
async fn profile<T: ProfileTarget + Send + Sync + 'static>(
    State(admin): State<Arc<ProfileAdmin<T>>>,
    req: Request,
) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let (parts, body) = req.into_parts();
    let read = |limit| async move { to_bytes(body, limit).await.ok().map(|b| b.to_vec()) };
    let answer = admin
        .handle(peer, &parts.method, &parts.headers, read)
        .await;
    answer.map(Body::from).into_response()
}
