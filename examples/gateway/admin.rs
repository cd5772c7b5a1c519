//! The admin routes on the operators' listener: read and replace the profile in force without a
//! deployment (shared by `main.rs` and the tests, which include this file with `#[path]`). The
//! rules are the engine's [`tollgate::http::admin`], which `tollgate-server` serves too; this
//! file only mounts them on axum.
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /admin/profile` | 200, `application/yaml`: the profile in force, as tollgate reads it back (comments and defaults are not kept), with an `ETag` |
//! | `PUT /admin/profile` | 200 and the profile is in force from the next request; or 422 (invalid: `line`, `column`), 409 (valid, but a reload may not make that change, e.g. `identities.capacity`), 412 (`If-Match` names another profile than the one in force), 400 (not UTF-8), 413 (over 4 MiB), 500 (not saved); the old profile stays in force on every refusal |
//!
//! `If-Match: <the ETag of a GET>` on a `PUT` makes it replace only the profile that was read,
//! so that two operators editing at once do not undo each other's change unseen.
//!
//! Who may call them, all three required:
//! - a token: the routes exist only when [`ADMIN_TOKEN_ENV`] is set (at least
//!   [`MIN_TOKEN_LEN`] bytes) when the gateway starts, and every request must carry
//!   `Authorization: Bearer <token>`, compared in constant time; without it, or with another,
//!   `401` with `WWW-Authenticate: Bearer`;
//! - loopback: a peer that is not a loopback address gets `403`, unless the operator started
//!   the gateway with `--admin-remote` (the operators' listener binds loopback by default, and
//!   binding it elsewhere does not open the admin routes by itself);
//! - the operators' listener: they are never on the public one.
//!
//! A `PUT` that is put in force is also written to the profile file (a temporary file beside
//! it, fsync, rename), so that the file watcher, a `SIGHUP` or a restart keep it rather than
//! revert to the old file. The file is written first and renamed over the old one only once
//! the limiter took the profile: a refused profile leaves the file as it was. `--admin-in-memory`
//! keeps accepted profiles in memory only (a restart or an edit of the file then replaces them).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{ConnectInfo, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
pub use tollgate::http::admin::AdminToken;
use tollgate::http::admin::ProfileAdmin;
// `main.rs` names them in its usage and errors; the tests that include this file do not.
#[allow(unused_imports)]
pub use tollgate::http::admin::{ADMIN_TOKEN_ENV, MIN_TOKEN_LEN};
use tollgate::Limiter;

/// What the admin routes need: the engine's route over the limiter.
pub struct Admin(ProfileAdmin<Limiter>);

impl Admin {
    /// Admin routes over `limiter`, for callers with `token`; accepted profiles are written
    /// to `save_to` when given. Only loopback peers are answered unless `allow_remote`.
    pub fn new(
        limiter: Arc<Limiter>,
        token: AdminToken,
        save_to: Option<PathBuf>,
        allow_remote: bool,
    ) -> Admin {
        Admin(ProfileAdmin::new(limiter, token, save_to, allow_remote).program("gateway"))
    }
}

/// `GET` and `PUT /admin/profile`, to merge into the operators' router.
pub fn router(admin: Arc<Admin>) -> Router {
    Router::new()
        .route("/admin/profile", any(profile))
        .with_state(admin)
}

/// The engine's route on axum: the peer from `ConnectInfo`, the body read up to its limit.
async fn profile(State(admin): State<Arc<Admin>>, req: Request) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let (parts, body) = req.into_parts();
    let read = |limit| async move { to_bytes(body, limit).await.ok().map(|b| b.to_vec()) };
    let answer = admin
        .0
        .handle(peer, &parts.method, &parts.headers, read)
        .await;
    answer.map(Body::from).into_response()
}
