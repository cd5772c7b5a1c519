//! What `admit` answers, as Python sees it, and the handle of a route class.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tollgate::http::{policy_header, Answer, RequestId};
use tollgate::{BucketKind, Cause, Decision, Profile};

/// A refusal as Python gets it: status, headers, problem body.
type Refusal<'py> = (u16, Vec<(String, String)>, Bound<'py, PyBytes>);

/// A route class of one limiter's profile, from `Limiter.route_class(name)`: resolve it once,
/// at start-up, so that `admit` does no string lookup. Valid across reloads.
#[pyclass(name = "RouteClass", module = "tollgate", frozen)]
pub struct PyRouteClass {
    pub(crate) class: tollgate::RouteClass,
    /// The limiter that issued it: another limiter's handle is refused, not misread.
    pub(crate) limiter_id: u64,
    pub(crate) name: String,
}

#[pymethods]
impl PyRouteClass {
    /// The class's name in the profile.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The class's position in the profile's `route_classes`.
    #[getter]
    fn index(&self) -> u32 {
        self.class.index()
    }

    fn __repr__(&self) -> String {
        format!("RouteClass({:?})", self.name)
    }
}

/// The answer to one request: `admitted`, `status` (200, 429 or 503), the wait, and which
/// bucket or shared resource refused. Falsy when refused.
#[pyclass(name = "Decision", module = "tollgate", frozen)]
pub struct PyDecision {
    pub(crate) decision: Decision,
    /// The profile in force when it was decided and the route class charged, for a refusal's
    /// headers and body (`None` for an admission, which needs neither).
    pub(crate) refused: Option<(Arc<Profile>, tollgate::RouteClass)>,
}

impl PyDecision {
    pub(crate) fn new(
        decision: Decision,
        refused: Option<(Arc<Profile>, tollgate::RouteClass)>,
    ) -> Self {
        PyDecision { decision, refused }
    }

    fn profile(&self) -> Option<&Profile> {
        self.refused.as_ref().map(|(p, _)| &**p)
    }
}

#[pymethods]
impl PyDecision {
    /// True if the request was admitted (charged).
    #[getter]
    fn admitted(&self) -> bool {
        self.decision.is_admit()
    }

    /// 200 (admitted: the handler decides the real status), 429 (the caller's own quota) or
    /// 503 (shared capacity or the store).
    #[getter]
    fn status(&self) -> u16 {
        self.decision.http_status()
    }

    /// Seconds until the same request is admitted, exact to the nanosecond; `None` where no
    /// wait can be said (admitted, a cost above the bucket, a 503 without a window).
    #[getter]
    fn retry_after(&self) -> Option<f64> {
        self.decision.retry_after().map(|d| d.as_secs_f64())
    }

    /// `Retry-After` as the header says it: whole seconds rounded up, at least 1, capped at
    /// the profile's `retry_after.max`; `None` where the header is omitted.
    #[getter]
    fn retry_after_secs(&self) -> Option<u64> {
        let profile = self.profile()?;
        self.decision
            .retry_after_secs(profile.retry_after.max.get())
    }

    /// The caller's bucket that refused: `"burst"`, `"sustained"` or `None`.
    #[getter]
    fn bucket(&self) -> Option<&'static str> {
        match self.decision {
            Decision::Throttle { bucket, .. } | Decision::Exceeds { bucket } => {
                Some(match bucket {
                    BucketKind::Burst => "burst",
                    BucketKind::Sustained => "sustained",
                })
            }
            _ => None,
        }
    }

    /// The shared resource that refused a 503: `"shard_full"`, `"tenant_share"`,
    /// `"table_full"`, `"store_unavailable"`; `None` otherwise. For operators: callers see
    /// only the catalog code.
    #[getter]
    fn cause(&self) -> Option<&'static str> {
        match self.decision {
            Decision::Unavailable { cause, .. } => Some(match cause {
                Cause::ShardFull => "shard_full",
                Cause::TenantShare => "tenant_share",
                Cause::TableFull => "table_full",
                Cause::StoreUnavailable => "store_unavailable",
            }),
            _ => None,
        }
    }

    /// The outcome's metric label: `admitted`, `throttled`, `exceeds` or `unavailable`.
    #[getter]
    fn outcome(&self) -> &'static str {
        self.decision.outcome().label()
    }

    /// The catalog code callers see (`rate_limited`, ...); `None` when admitted.
    #[getter]
    fn code(&self) -> Option<String> {
        let profile = self.profile()?;
        self.decision.catalog_code(profile).map(str::to_owned)
    }

    /// The refusal as the Rust HTTP contract writes it: `(status, headers, body)` with the
    /// route class's `RateLimit-Policy` and the RFC 9457 problem body as bytes; `None` when
    /// admitted. `request_id` is the caller's
    /// `X-Request-Id` if well-formed (else a fresh one is made).
    #[pyo3(signature = (request_id=None))]
    fn refusal<'py>(&self, py: Python<'py>, request_id: Option<&str>) -> Option<Refusal<'py>> {
        let (profile, class) = self.refused.as_ref()?;
        let id = request_id_or_new(request_id);
        let mut answer = Answer::new(self.decision, profile, &id);
        // The class's policy, as the middleware sends it (a reload may not drop a class, but
        // the profile here is the one the decision was made under).
        let policy = profile
            .route_classes
            .iter()
            .nth(class.index() as usize)
            .map(|(_, limits)| policy_header(limits));
        if let Some(policy) = &policy {
            answer = answer.with_policy(policy);
        }
        let response = answer.refusal::<Vec<u8>>()?;
        let headers = crate::answer::header_pairs(response.headers());
        Some((
            response.status().as_u16(),
            headers,
            PyBytes::new(py, response.body()),
        ))
    }

    fn __bool__(&self) -> bool {
        self.decision.is_admit()
    }

    fn __repr__(&self) -> String {
        match self.decision {
            Decision::Admit => "Decision(admitted)".to_owned(),
            d => format!(
                "Decision(status={}, outcome={:?}, retry_after={:?}, bucket={:?}, cause={:?})",
                d.http_status(),
                d.outcome().label(),
                d.retry_after().map(|w| w.as_secs_f64()),
                self.bucket(),
                self.cause()
            ),
        }
    }
}

/// The caller's request id if it is well-formed, else a fresh one (as the tower layer does).
pub(crate) fn request_id_or_new(given: Option<&str>) -> RequestId {
    given
        .and_then(RequestId::parse)
        .unwrap_or_else(RequestId::generate)
}
