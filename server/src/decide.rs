//! One `ShouldRateLimit`: check the request, map its descriptors, charge them all or none,
//! answer. The gRPC service and `POST /json` both come here.

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use http::HeaderValue;
use tollgate::http::{policy_header, RequestId};
use tollgate::profile::RouteClassLimits;
use tollgate::{Admission, BucketKind, Decision, Key, Profile};
use tonic::Status;

use crate::backend::Backend;
use crate::mapping::{Mapped, Mapping};
use crate::metrics as m;
use crate::request::costs;
use crate::response;

/// The descriptor entry that carries the request's id where the call's metadata does not
/// (Envoy's rate limit filter sends none: a `request_headers` action on `x-request-id` with
/// this `descriptor_key` adds it). Rules ignore it unless they name it.
pub const REQUEST_ID_ENTRY: &str = "x-request-id";

/// What a decision reads from the profile in force, swapped as one on reload.
struct Compiled {
    profile: Arc<Profile>,
    mapping: Mapping,
    /// Limits and `RateLimit-Policy` per route class, in handle order.
    limits: Vec<RouteClassLimits>,
    policies: Vec<HeaderValue>,
}

impl Compiled {
    fn new(profile: Arc<Profile>) -> Result<Compiled, String> {
        let mapping = Mapping::new(&profile)?;
        for w in profile.descriptors.iter().flat_map(|d| d.warnings()) {
            tracing::warn!("{w}");
        }
        let limits: Vec<RouteClassLimits> = profile.route_classes.iter().map(|(_, l)| *l).collect();
        let policies = limits.iter().map(policy_header).collect();
        Ok(Compiled {
            profile,
            mapping,
            limits,
            policies,
        })
    }
}

/// Why [`RateLimiter::reload`] refused a profile.
#[derive(Debug)]
pub enum ReloadError {
    /// The backend refused it (a change a reload may not make, e.g. `identities.capacity`).
    Profile(tollgate::ProfileError),
    /// Its `descriptors:` section is missing or does not compile.
    Rules(String),
}

impl std::fmt::Display for ReloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReloadError::Profile(e) => e.fmt(f),
            ReloadError::Rules(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for ReloadError {}

/// The rate limit service over a backend: shared by the gRPC server and the HTTP side.
pub struct RateLimiter<B> {
    backend: Arc<B>,
    compiled: ArcSwap<Compiled>,
}

impl<B: Backend> RateLimiter<B> {
    /// The service over `backend`, with the rules of the profile it runs; refused if that
    /// profile has no `descriptors:` section.
    pub fn new(backend: Arc<B>) -> Result<RateLimiter<B>, String> {
        let compiled = Compiled::new(backend.profile())?;
        Ok(RateLimiter {
            backend,
            compiled: ArcSwap::from_pointee(compiled),
        })
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// The profile in force.
    pub fn profile(&self) -> Arc<Profile> {
        Arc::clone(&self.compiled.load().profile)
    }

    /// Reads `path` and swaps it in: limits (bucket state kept) and descriptor rules together.
    /// A profile that is invalid, that the backend refuses, or that has no `descriptors:`
    /// section is refused and the old one stays in force.
    pub fn reload_from(&self, path: &Path) -> Result<(), String> {
        let profile = Profile::from_path(path).map_err(|e| e.to_string())?;
        self.reload(profile).map_err(|e| e.to_string())
    }

    /// Swaps `profile` in: limits (bucket state kept) and descriptor rules together. Refused,
    /// with the old profile left in force, if the backend refuses it or its `descriptors:`
    /// section does not compile.
    pub fn reload(&self, profile: Profile) -> Result<(), ReloadError> {
        self.reload_by(profile, |backend, p| backend.reload(p))
    }

    /// [`RateLimiter::reload`], with the backend's swap done by `swap` (e.g. a fleet reload
    /// that also records the published version).
    pub fn reload_by(
        &self,
        profile: Profile,
        swap: impl FnOnce(&B, Profile) -> Result<(), tollgate::ProfileError>,
    ) -> Result<(), ReloadError> {
        // Checked before the backend swaps, so that limits and rules never disagree.
        Compiled::new(Arc::new(profile.clone())).map_err(ReloadError::Rules)?;
        swap(&self.backend, profile).map_err(ReloadError::Profile)?;
        let compiled = Compiled::new(self.backend.profile()).map_err(ReloadError::Rules)?;
        self.compiled.store(Arc::new(compiled));
        Ok(())
    }

    /// Answers one request. `request_id` is what the call's metadata carried as
    /// `x-request-id`, if anything; else a descriptor entry [`REQUEST_ID_ENTRY`] gives it; a
    /// missing or malformed id is replaced by a fresh one.
    ///
    /// Errors: `INVALID_ARGUMENT` for a malformed request, `NOT_FOUND` for a domain the
    /// profile refuses, `PERMISSION_DENIED` for a descriptor no rule matches when the profile
    /// refuses those, `UNAVAILABLE` for shared capacity or the store; nothing is charged.
    pub async fn should_rate_limit(
        &self,
        req: &RateLimitRequest,
        request_id: Option<&str>,
    ) -> Result<RateLimitResponse, Status> {
        let costs = costs(req).map_err(|e| {
            m::request("invalid");
            Status::invalid_argument(e.0)
        })?;
        let c = self.compiled.load_full();
        if req.domain != c.mapping.domain() {
            m::unknown_domain();
            if c.mapping.refuses_unknown_domain() {
                m::request("unknown_domain");
                return Err(Status::not_found(format!(
                    "domain not served: this server serves {:?}",
                    c.mapping.domain()
                )));
            }
            m::request("ok");
            let statuses = req
                .descriptors
                .iter()
                .map(|_| response::status_ok())
                .collect();
            return Ok(response::admitted(statuses, None));
        }
        // Which descriptor is charged to which key, and at what cost.
        let mut items: Vec<(Key<'_>, u32)> = Vec::with_capacity(req.descriptors.len());
        let mut at: Vec<Option<usize>> = Vec::with_capacity(req.descriptors.len());
        for (i, (d, cost)) in req.descriptors.iter().zip(&costs).enumerate() {
            match c.mapping.map(&d.entries) {
                Ok(Mapped::Key { key, .. }) => {
                    at.push(Some(items.len()));
                    items.push((key, *cost));
                }
                Ok(Mapped::Unmatched) if c.mapping.refuses_unmatched() => {
                    m::request("unmatched");
                    return Err(Status::permission_denied(format!(
                        "descriptors[{i}] matches no rule of the profile, which refuses unmatched \
                         descriptors"
                    )));
                }
                Ok(Mapped::Unmatched) => at.push(None),
                Err(e) => {
                    m::request("invalid");
                    return Err(Status::invalid_argument(format!(
                        "descriptors[{i}]: {}",
                        e.0
                    )));
                }
            }
        }
        let profile = &c.profile;
        let limits_of = |k: &Key<'_>| c.limits[k.class().index() as usize];
        // All or nothing: a refusal gives back exactly what the descriptors before it took.
        match self.backend.admit_all(&items).await {
            Ok(()) => {
                m::request("ok");
                let mut statuses = Vec::with_capacity(at.len());
                for slot in &at {
                    statuses.push(match slot {
                        None => response::status_ok(),
                        Some(j) => {
                            let key = &items[*j].0;
                            let remaining = self.remaining(key).await;
                            response::status(
                                Code::Ok,
                                &limits_of(key),
                                BucketKind::Burst,
                                None,
                                remaining,
                            )
                        }
                    });
                }
                let policy = items
                    .first()
                    .map(|(k, _)| &c.policies[k.class().index() as usize]);
                Ok(response::admitted(statuses, policy))
            }
            Err(refused) => {
                let decision = refused.decision;
                let key = &items[refused.index].0;
                let kind = match decision {
                    // The caller's own quota (Envoy's 429); a cost its bucket can never hold
                    // is one too, with no wait (none would help).
                    Decision::Throttle { bucket, .. } | Decision::Exceeds { bucket } => bucket,
                    Decision::Unavailable { .. } => {
                        m::request("unavailable");
                        let code = decision.catalog_code(profile).unwrap_or("over_capacity");
                        return Err(Status::unavailable(code.to_owned()));
                    }
                    Decision::Admit => unreachable!("a refusal is never Admit"),
                };
                m::request("over_limit");
                let remaining = self.remaining(key).await;
                let statuses = at
                    .iter()
                    .map(|slot| match slot {
                        Some(j) if *j == refused.index => response::status(
                            Code::OverLimit,
                            &limits_of(key),
                            kind,
                            decision.retry_after(),
                            remaining,
                        ),
                        _ => response::status_ok(),
                    })
                    .collect();
                // Envoy sends no request id with its call; a descriptor entry may carry it.
                let from_entry = || {
                    req.descriptors
                        .iter()
                        .flat_map(|d| &d.entries)
                        .find(|e| e.key == REQUEST_ID_ENTRY)
                        .map(|e| e.value.as_str())
                };
                let id = request_id
                    .or_else(from_entry)
                    .and_then(RequestId::parse)
                    .unwrap_or_else(RequestId::generate);
                let policy = &c.policies[key.class().index() as usize];
                Ok(response::over_limit(
                    statuses, decision, profile, &id, policy,
                ))
            }
        }
    }

    /// The caller's own remaining tokens, asked only where the profile exposes them.
    async fn remaining(&self, key: &Key<'_>) -> Option<tollgate::Remaining> {
        if self.compiled.load().profile.expose_remaining {
            self.backend.remaining(key).await
        } else {
            None
        }
    }
}
