//! `GET` / `PUT /admin/profile` on the `--http` listener: read and replace the profile in force
//! without a deployment. The same routes and rules as the demo gateway's
//! (`examples/gateway/admin.rs`, which the server cannot depend on: an example is not a
//! library), over [`RateLimiter`] so that limits and descriptor rules change together.
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /admin/profile` | 200, `application/yaml`: the profile in force, as tollgate reads it back (comments and defaults are not kept), with an `ETag` |
//! | `PUT /admin/profile` | 200 and the profile is in force from the next request; or 422 (invalid: `line`, `column`; or descriptor rules that do not compile), 409 (valid, but a reload may not make that change, e.g. `identities.capacity`), 412 (`If-Match` names another profile than the one in force), 400 (not UTF-8), 413 (over 4 MiB), 500 (not saved); the old profile stays in force on every refusal |
//!
//! Who may call them, all required:
//! - a token: the routes exist only when [`ADMIN_TOKEN_ENV`] is set (at least
//!   [`MIN_TOKEN_LEN`] bytes) when the server starts, and every request must carry
//!   `Authorization: Bearer <token>`, compared in constant time; without it, or with another,
//!   `401` with `WWW-Authenticate: Bearer`;
//! - loopback: a peer that is not a loopback address gets `403`, unless the server was started
//!   with `--admin-remote`.
//!
//! A `PUT` that is put in force is also written to the profile file (a temporary file beside
//! it, fsync, rename), so that the file watcher, a `SIGHUP` or a restart keep it; the file is
//! renamed over the old one only once the limiter took the profile. `--admin-in-memory` keeps
//! accepted profiles in memory only. A server that follows a fleet profile
//! (`--watch-profile`) answers a `PUT` with 409 `fleet_profile`: the fleet's profile is
//! published to Redis, not put to one server.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::{to_bytes, Body};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{
    HeaderValue, AUTHORIZATION, CONTENT_TYPE, ETAG, IF_MATCH, WWW_AUTHENTICATE,
};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use serde_json::{json, Value};
use subtle::ConstantTimeEq;
use tollgate::http::PROBLEM_JSON;
use tollgate::profile::{ProfileErrorKind, MAX_PROFILE_BYTES};
use tollgate::{Profile, ProfileError};

use crate::backend::Backend;
use crate::decide::{RateLimiter, ReloadError};

/// The environment variable that holds the admin bearer token.
pub const ADMIN_TOKEN_ENV: &str = "TOLLGATE_ADMIN_TOKEN";
/// The shortest admin token accepted, in bytes (a guessable token is refused at start).
pub const MIN_TOKEN_LEN: usize = 16;

/// The admin bearer token. Its `Debug` does not show it.
pub struct AdminToken(Vec<u8>);

impl core::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

impl AdminToken {
    /// The token if it is at least [`MIN_TOKEN_LEN`] bytes of visible ASCII (what a header
    /// value can carry after `Bearer `).
    pub fn new(token: &str) -> Result<AdminToken, String> {
        if token.len() < MIN_TOKEN_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "{ADMIN_TOKEN_ENV}: at least {MIN_TOKEN_LEN} bytes of visible ASCII (no spaces)"
            ));
        }
        Ok(AdminToken(token.as_bytes().to_vec()))
    }

    /// From [`ADMIN_TOKEN_ENV`]: `None` when it is unset or empty (the admin routes are off).
    pub fn from_env() -> Result<Option<AdminToken>, String> {
        match std::env::var(ADMIN_TOKEN_ENV) {
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(format!("{ADMIN_TOKEN_ENV}: not valid UTF-8"))
            }
            Ok(t) if t.is_empty() => Ok(None),
            Ok(t) => AdminToken::new(&t).map(Some),
        }
    }

    /// True when `presented` is the token (the gateway's compare, copied: the server cannot
    /// use an example's code). The time taken depends on the lengths only, never
    /// on how many bytes match: the presented bytes are compared with `subtle` over the
    /// token's whole length (padded or cut to it), and the lengths in constant time too.
    fn matches(&self, presented: &[u8]) -> bool {
        let mut padded = vec![0u8; self.0.len()];
        let n = presented.len().min(padded.len());
        padded[..n].copy_from_slice(&presented[..n]);
        let same_bytes = padded.ct_eq(&self.0);
        let same_len = (presented.len() as u64).ct_eq(&(self.0.len() as u64));
        (same_bytes & same_len).into()
    }
}

/// What the admin routes need.
pub struct Admin<B> {
    limiter: Arc<RateLimiter<B>>,
    token: AdminToken,
    /// Where an accepted profile is written; `None`: kept in memory only.
    save_to: Option<PathBuf>,
    /// Answer peers that are not loopback (`--admin-remote`).
    allow_remote: bool,
    /// One `PUT` at a time, so that the file and the profile in force stay the same.
    writing: Mutex<()>,
    /// The fleet profile this server follows (`--watch-profile`), if any: a `PUT` is then
    /// refused, since the watcher would put the fleet's profile back at its next look.
    fleet: Option<String>,
}

impl<B: Backend> Admin<B> {
    /// Admin routes over `limiter`, for callers with `token`; accepted profiles are written
    /// to `save_to` when given. Only loopback peers are answered unless `allow_remote`.
    pub fn new(
        limiter: Arc<RateLimiter<B>>,
        token: AdminToken,
        save_to: Option<PathBuf>,
        allow_remote: bool,
    ) -> Admin<B> {
        Admin {
            limiter,
            token,
            save_to,
            allow_remote,
            writing: Mutex::new(()),
            fleet: None,
        }
    }

    /// Marks the server as following the fleet profile `name`: `PUT` answers 409
    /// `fleet_profile`, pointing at `tollgate-server publish`; `GET` works as before.
    pub fn following_fleet(mut self, name: &str) -> Admin<B> {
        self.fleet = Some(name.to_owned());
        self
    }
}

/// `GET` and `PUT /admin/profile`, to merge into the operators' router.
pub fn router<B: Backend>(admin: Arc<Admin<B>>) -> Router {
    Router::new()
        .route("/admin/profile", any(profile::<B>))
        .with_state(admin)
}

fn problem(status: StatusCode, code: &str, detail: String, extra: Value) -> Response {
    let mut body = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or(""),
        "status": status.as_u16(),
        "detail": detail,
        "code": code,
    });
    if let (Some(b), Value::Object(extra)) = (body.as_object_mut(), extra) {
        b.extend(extra);
    }
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    r
}

/// Peer, then token: `None` when the caller may go on.
fn refuse<B>(admin: &Admin<B>, req: &Request) -> Option<Response> {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    // No peer address (a router served without one) is not loopback: fail closed.
    if !admin.allow_remote && !peer.is_some_and(|ip| ip.is_loopback()) {
        return Some(problem(
            StatusCode::FORBIDDEN,
            "admin_loopback_only",
            "The admin routes answer loopback callers only (start the server with \
             --admin-remote to change that)."
                .into(),
            Value::Null,
        ));
    }
    let presented = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    let (challenge, detail) = match presented {
        Some(t) if admin.token.matches(t) => return None,
        Some(_) => (
            "Bearer realm=\"tollgate-admin\", error=\"invalid_token\"",
            "The admin token is not valid.",
        ),
        None => (
            "Bearer realm=\"tollgate-admin\"",
            "The admin routes need Authorization: Bearer <token>.",
        ),
    };
    let mut r = problem(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        detail.into(),
        Value::Null,
    );
    r.headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    Some(r)
}

async fn profile<B: Backend>(State(admin): State<Arc<Admin<B>>>, req: Request) -> Response {
    if let Some(refusal) = refuse(&admin, &req) {
        return refusal;
    }
    match *req.method() {
        Method::GET => get_profile(&admin),
        Method::PUT if admin.fleet.is_some() => problem(
            StatusCode::CONFLICT,
            "fleet_profile",
            format!(
                "This server follows the fleet profile {:?} in Redis: publish the profile \
                 with `tollgate-server publish --name {0}` instead; the profile in force is \
                 unchanged.",
                admin.fleet.as_deref().unwrap_or_default()
            ),
            Value::Null,
        ),
        Method::PUT => {
            let if_match = req.headers().get(IF_MATCH).cloned();
            put_profile(&admin, if_match, req.into_body()).await
        }
        _ => {
            let mut r = problem(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "GET or PUT.".into(),
                Value::Null,
            );
            r.headers_mut()
                .insert("allow", HeaderValue::from_static("GET, PUT"));
            r
        }
    }
}

/// The profile in force as YAML, and its entity tag: a digest of that text (a version tag for
/// `If-Match`, not a secret).
fn current<B: Backend>(admin: &Admin<B>) -> Result<(String, String), serde_yaml_ng::Error> {
    use std::hash::{Hash, Hasher};
    let text = serde_yaml_ng::to_string(&*admin.limiter.profile())?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    Ok((text, format!("\"{:016x}\"", h.finish())))
}

fn get_profile<B: Backend>(admin: &Admin<B>) -> Response {
    match current(admin) {
        Ok((text, etag)) => (
            [(CONTENT_TYPE, "application/yaml".to_owned()), (ETAG, etag)],
            text,
        )
            .into_response(),
        Err(e) => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the profile could not be written as YAML: {e}"),
            Value::Null,
        ),
    }
}

/// The refusal of a profile: 422 with its position for an invalid one, 409 for a valid one
/// that a reload may not put in force.
fn refused(e: &ProfileError) -> Response {
    let (status, code) = match e.kind() {
        ProfileErrorKind::Reload => (StatusCode::CONFLICT, "reload_refused"),
        _ => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_profile"),
    };
    problem(
        status,
        code,
        format!("{e}; the profile in force is unchanged"),
        json!({ "line": e.line(), "column": e.column(), "message": e.message() }),
    )
}

async fn put_profile<B: Backend>(
    admin: &Admin<B>,
    if_match: Option<HeaderValue>,
    body: Body,
) -> Response {
    let bytes = match to_bytes(body, MAX_PROFILE_BYTES).await {
        Ok(b) => b,
        Err(_) => {
            return problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("A profile is at most {MAX_PROFILE_BYTES} bytes."),
                Value::Null,
            )
        }
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return problem(
            StatusCode::BAD_REQUEST,
            "invalid_profile",
            "The profile is not UTF-8 text.".into(),
            Value::Null,
        );
    };
    let new = match Profile::from_yaml(text) {
        Ok(p) => p,
        Err(e) => return refused(&e),
    };
    let name = new.name.clone();
    let _one_at_a_time = admin.writing.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(wanted) = &if_match {
        let etag = current(admin).map(|(_, etag)| etag).unwrap_or_default();
        let matches = wanted.as_bytes() == b"*"
            || wanted
                .to_str()
                .is_ok_and(|w| w.split(',').any(|t| t.trim() == etag));
        if !matches {
            return problem(
                StatusCode::PRECONDITION_FAILED,
                "profile_changed",
                format!(
                    "The profile in force is {etag}, not the one If-Match names: read it again \
                     (GET) and apply the change to it."
                ),
                json!({ "etag": etag }),
            );
        }
    }
    let staged = match &admin.save_to {
        Some(path) => match stage(path, text) {
            Ok(tmp) => Some((path, tmp)),
            Err(e) => {
                return problem(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "not_saved",
                    format!(
                        "{}: cannot write the profile ({e}); the profile in force is unchanged",
                        path.display()
                    ),
                    Value::Null,
                )
            }
        },
        None => None,
    };
    if let Err(e) = admin.limiter.reload(new) {
        if let Some((_, tmp)) = &staged {
            let _ = std::fs::remove_file(tmp);
        }
        return match e {
            ReloadError::Profile(e) => refused(&e),
            ReloadError::Rules(e) => problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_profile",
                format!("descriptors: {e}; the profile in force is unchanged"),
                Value::Null,
            ),
        };
    }
    let saved = match &staged {
        None => Ok(None),
        Some((path, tmp)) => commit(tmp, path).map(|()| Some(path.display().to_string())),
    };
    match saved {
        Ok(saved_to) => {
            tracing::info!(profile = %name, saved_to = ?saved_to, "profile replaced through the admin endpoint");
            axum::Json(json!({ "profile": name, "in_force": true, "saved_to": saved_to }))
                .into_response()
        }
        Err(e) => {
            tracing::warn!(profile = %name, error = %e, "profile in force but not saved");
            problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "not_saved",
                format!(
                    "The profile is in force but could not be saved ({e}): a reload of the \
                     file or a restart would bring back the old one."
                ),
                json!({ "in_force": true }),
            )
        }
    }
}

/// Writes `text` to a temporary file beside `path` and syncs it; returns its path.
fn stage(path: &Path, text: &str) -> std::io::Result<PathBuf> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".admin-{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(tmp)
}

/// Renames the staged file over `path` and syncs the directory, so that the new profile
/// survives a crash right after the answer.
fn commit(tmp: &Path, path: &Path) -> std::io::Result<()> {
    std::fs::rename(tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
