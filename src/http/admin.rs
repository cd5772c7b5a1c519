//! `GET` / `PUT /admin/profile`: read and replace the profile in force without a deployment,
//! with the rules written once for every server that offers it (the demo gateway over a
//! [`Limiter`], `tollgate-server` over its descriptor mapping), so that an operator's script
//! meets the same answers, and the same protections, on both. Framework-neutral (the `http`
//! crate's types only): a server reads the request and its body its own way and hands them to
//! [`ProfileAdmin::handle`].
//!
//! | route | answer |
//! | --- | --- |
//! | `GET` | 200, `application/yaml`: the profile in force, as tollgate reads it back (comments and defaults are not kept), with an `ETag` |
//! | `PUT` | 200 and the profile is in force from the next request; or 422 (invalid: `line`, `column`; or refused by the target, e.g. descriptor rules that do not compile), 409 (valid, but a reload may not make that change, e.g. `identities.capacity`), 412 (`If-Match` names another profile than the one in force), 400 (not UTF-8), 413 (over [`MAX_PROFILE_BYTES`]), 500 (not saved); the old profile stays in force on every refusal |
//!
//! `If-Match: <the ETag of a GET>` on a `PUT` makes it replace only the profile that was read,
//! so that two operators editing at once do not undo each other's change unseen.
//!
//! Who may call it, both required, checked before the body is read:
//! - loopback: a peer that is not a loopback address (or no peer address at all) gets `403`,
//!   unless the operator allowed remote callers (`--admin-remote`);
//! - a token: `Authorization: Bearer <token>`, compared in constant time; without it, or with
//!   another, `401` with `WWW-Authenticate: Bearer`.
//!
//! A `PUT` that is put in force is also written to the profile file when one is given (a
//! temporary file beside it, fsync, rename, directory fsync), so that a file watcher, a
//! `SIGHUP` or a restart keep it. The file is staged first and renamed over the old one only
//! once the target took the profile: a refused profile leaves the file as it was.

use std::future::Future;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use http::header::{
    HeaderValue, ALLOW, AUTHORIZATION, CONTENT_TYPE, ETAG, IF_MATCH, WWW_AUTHENTICATE,
};
use http::{HeaderMap, Method, Response, StatusCode};
use serde_json::{json, Value};

mod token;

pub use token::{AdminToken, ADMIN_TOKEN_ENV, MIN_TOKEN_LEN};

use super::PROBLEM_JSON;
use crate::limiter::Limiter;
use crate::profile::{Profile, ProfileError, ProfileErrorKind, MAX_PROFILE_BYTES};

/// Why a target did not put a profile in force.
#[derive(Debug)]
pub enum ReloadRefusal {
    /// The limiter refused it: 409 for a change a reload may not make, 422 otherwise (with
    /// the line and column).
    Profile(ProfileError),
    /// Valid for the limiter, refused by what the target builds on it (422, this detail).
    Invalid(String),
}

/// What the admin route reads and replaces: the profile in force.
pub trait ProfileTarget: Send + Sync + 'static {
    /// The profile in force.
    fn profile(&self) -> Arc<Profile>;
    /// Puts `profile` in force, or leaves the old one and says why.
    fn reload(&self, profile: Profile) -> Result<(), ReloadRefusal>;
}

impl ProfileTarget for Limiter {
    fn profile(&self) -> Arc<Profile> {
        Limiter::profile(self)
    }

    fn reload(&self, profile: Profile) -> Result<(), ReloadRefusal> {
        Limiter::reload(self, profile).map_err(ReloadRefusal::Profile)
    }
}

#[cfg(feature = "redis")]
impl ProfileTarget for crate::redis::RedisLimiter {
    fn profile(&self) -> Arc<Profile> {
        crate::redis::RedisLimiter::profile(self)
    }

    fn reload(&self, profile: Profile) -> Result<(), ReloadRefusal> {
        crate::redis::RedisLimiter::reload(self, profile).map_err(ReloadRefusal::Profile)
    }
}

/// The admin profile route over a target.
pub struct ProfileAdmin<T> {
    target: Arc<T>,
    token: AdminToken,
    /// Where an accepted profile is written; `None`: kept in memory only.
    save_to: Option<PathBuf>,
    /// Answer peers that are not loopback (`--admin-remote`).
    allow_remote: bool,
    /// Named in the `403`'s hint: "start the {program} with --admin-remote".
    program: &'static str,
    /// One `PUT` at a time, so that the file and the profile in force stay the same.
    writing: Mutex<()>,
    /// Every `PUT` answered 409 with this code and detail ([`ProfileAdmin::refuse_puts`]).
    put_refusal: Option<(&'static str, String)>,
}

impl<T: ProfileTarget> ProfileAdmin<T> {
    /// The route over `target`, for callers with `token`; accepted profiles are written to
    /// `save_to` when given. Only loopback peers are answered unless `allow_remote`.
    pub fn new(
        target: Arc<T>,
        token: AdminToken,
        save_to: Option<PathBuf>,
        allow_remote: bool,
    ) -> Self {
        ProfileAdmin {
            target,
            token,
            save_to,
            allow_remote,
            program: "server",
            writing: Mutex::new(()),
            put_refusal: None,
        }
    }

    /// What the `403` tells the operator to restart with `--admin-remote` ("server" unless
    /// said).
    pub fn program(mut self, name: &'static str) -> Self {
        self.program = name;
        self
    }

    /// Refuses every `PUT`, once the token and the peer are checked, with 409 `code` and
    /// `detail`, the profile in force unchanged: for a server whose profile comes from
    /// elsewhere (a fleet profile in Redis), which would put its own back at its next look.
    /// `GET` answers as before.
    pub fn refuse_puts(mut self, code: &'static str, detail: String) -> Self {
        self.put_refusal = Some((code, detail));
        self
    }

    /// Answers one request: `peer` is the caller's address (`None` when the server has none:
    /// refused, as not loopback), `read_body(limit)` reads the body, `None` when it is longer
    /// than `limit`; it is called only for an authorized `PUT`.
    pub async fn handle<F, Fut>(
        &self,
        peer: Option<IpAddr>,
        method: &Method,
        headers: &HeaderMap,
        read_body: F,
    ) -> Response<String>
    where
        F: FnOnce(usize) -> Fut,
        Fut: Future<Output = Option<Vec<u8>>>,
    {
        if let Some(refusal) = self.refuse(peer, headers) {
            return refusal;
        }
        match *method {
            Method::GET => self.get(),
            Method::PUT if self.put_refusal.is_some() => {
                let (code, detail) = self.put_refusal.as_ref().expect("checked just above");
                problem(StatusCode::CONFLICT, code, detail.clone(), Value::Null)
            }
            Method::PUT => match read_body(MAX_PROFILE_BYTES).await {
                Some(body) => self.put(headers.get(IF_MATCH), &body),
                None => problem(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    format!("A profile is at most {MAX_PROFILE_BYTES} bytes."),
                    Value::Null,
                ),
            },
            _ => {
                let mut r = problem(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method_not_allowed",
                    "GET or PUT.".into(),
                    Value::Null,
                );
                r.headers_mut()
                    .insert(ALLOW, HeaderValue::from_static("GET, PUT"));
                r
            }
        }
    }

    /// Peer, then token: `None` when the caller may go on.
    fn refuse(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<Response<String>> {
        // No peer address (a router served without one) is not loopback: fail closed.
        if !self.allow_remote && !peer.is_some_and(|ip| ip.is_loopback()) {
            return Some(problem(
                StatusCode::FORBIDDEN,
                "admin_loopback_only",
                format!(
                    "The admin routes answer loopback callers only (start the {} with \
                     --admin-remote to change that).",
                    self.program
                ),
                Value::Null,
            ));
        }
        let presented = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
        let (challenge, detail) = match presented {
            Some(t) if self.token.matches(t) => return None,
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

    /// The profile in force as YAML, and its entity tag: a digest of that text (a version tag
    /// for `If-Match`, not a secret).
    fn current(&self) -> Result<(String, String), serde_yaml_ng::Error> {
        use std::hash::{Hash, Hasher};
        let text = serde_yaml_ng::to_string(&*self.target.profile())?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        Ok((text, format!("\"{:016x}\"", h.finish())))
    }

    fn get(&self) -> Response<String> {
        match self.current() {
            Ok((text, etag)) => {
                let mut r = Response::new(text);
                let h = r.headers_mut();
                h.insert(CONTENT_TYPE, HeaderValue::from_static("application/yaml"));
                if let Ok(v) = HeaderValue::from_str(&etag) {
                    h.insert(ETAG, v);
                }
                r
            }
            Err(e) => problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("the profile could not be written as YAML: {e}"),
                Value::Null,
            ),
        }
    }

    fn put(&self, if_match: Option<&HeaderValue>, body: &[u8]) -> Response<String> {
        let Ok(text) = std::str::from_utf8(body) else {
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
        let _one_at_a_time = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(wanted) = if_match {
            let etag = self.current().map(|(_, etag)| etag).unwrap_or_default();
            let matches = wanted.as_bytes() == b"*"
                || wanted
                    .to_str()
                    .is_ok_and(|w| w.split(',').any(|t| t.trim() == etag));
            if !matches {
                return problem(
                    StatusCode::PRECONDITION_FAILED,
                    "profile_changed",
                    format!(
                        "The profile in force is {etag}, not the one If-Match names: read it \
                         again (GET) and apply the change to it."
                    ),
                    json!({ "etag": etag }),
                );
            }
        }
        let staged = match &self.save_to {
            Some(path) => match stage(path, text) {
                Ok(tmp) => Some((path, tmp)),
                Err(e) => {
                    return problem(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "not_saved",
                        format!(
                            "{}: cannot write the profile ({e}); the profile in force is \
                             unchanged",
                            path.display()
                        ),
                        Value::Null,
                    )
                }
            },
            None => None,
        };
        if let Err(e) = self.target.reload(new) {
            if let Some((_, tmp)) = &staged {
                let _ = std::fs::remove_file(tmp);
            }
            return match e {
                ReloadRefusal::Profile(e) => refused(&e),
                ReloadRefusal::Invalid(detail) => problem(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_profile",
                    format!("{detail}; the profile in force is unchanged"),
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
                #[cfg(feature = "metrics")]
                tracing::info!(profile = %name, saved_to = ?saved_to, "profile replaced through the admin endpoint");
                let body = json!({ "profile": name, "in_force": true, "saved_to": saved_to });
                let mut r = Response::new(body.to_string());
                r.headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                r
            }
            Err(e) => {
                #[cfg(feature = "metrics")]
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
}

/// An RFC 9457 problem body with `code` and any `extra` members.
fn problem(status: StatusCode, code: &str, detail: String, extra: Value) -> Response<String> {
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
    let mut r = Response::new(body.to_string());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    r
}

/// The refusal of a profile: 422 with its position for an invalid one, 409 for a valid one
/// that a reload may not put in force.
fn refused(e: &ProfileError) -> Response<String> {
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
