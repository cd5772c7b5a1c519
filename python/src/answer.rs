//! One HTTP request decided as the tower layer decides it, and its answer as the Rust HTTP
//! contract writes it (`tollgate::http::Answer`): the ASGI and WSGI middleware only copy the
//! status, headers and body out.

use std::net::{IpAddr, Ipv4Addr};

use http::{HeaderMap, Method};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tollgate::http::{policy_header, Answer};
use tollgate::{Decision, Key, Remaining, RouteClass};

use crate::decision::{request_id_or_new, PyDecision};
use crate::limiter::{ip_of, key_of, Compiled};

/// Where a request is decided: the embedded table or Redis.
pub(crate) trait Backend {
    /// Decides `key` at `cost` (`None`: 1), with the caller's own remaining tokens when
    /// `remaining` is asked for and the backend can tell.
    fn decide(
        &self,
        py: Python<'_>,
        key: &Key<'_>,
        cost: Option<u32>,
        remaining: bool,
    ) -> (Decision, Option<Remaining>);

    /// The decision as Python sees it.
    fn wrap(
        &self,
        py: Python<'_>,
        decision: Decision,
        class: RouteClass,
    ) -> PyResult<Py<PyDecision>>;
}

/// Who is asking: an authenticated caller, or the peer address of an anonymous one.
pub(crate) enum Caller<'a> {
    Authenticated { tenant: &'a str, principal: &'a str },
    Anonymous(IpAddr),
}

impl<'a> Caller<'a> {
    /// A tenant needs a principal and the reverse; with neither, the caller is `peer` (a
    /// request with no peer address is charged to `0.0.0.0`, as the tower layer does).
    pub(crate) fn new(
        tenant: Option<&'a str>,
        principal: Option<&'a str>,
        peer: Option<&str>,
    ) -> PyResult<Caller<'a>> {
        match (tenant, principal) {
            (Some(tenant), Some(principal)) => Ok(Caller::Authenticated { tenant, principal }),
            (None, None) => Ok(Caller::Anonymous(match peer {
                Some(p) => ip_of(p)?,
                None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            })),
            _ => Err(crate::errors::InvalidKey::new_err(
                "tenant and principal go together: give both or neither",
            )),
        }
    }
}

/// The answer to one HTTP request: `status` (200 when admitted: the handler decides the real
/// one), the rate-limit `headers` to send, and for a refusal the problem `body`.
#[pyclass(name = "HttpAnswer", module = "tollgate", frozen)]
pub struct PyHttpAnswer {
    decision: Py<PyDecision>,
    status: u16,
    headers: Vec<(String, String)>,
    body: Option<Py<PyBytes>>,
    route_class: String,
}

#[pymethods]
impl PyHttpAnswer {
    /// The decision.
    #[getter]
    fn decision(&self, py: Python<'_>) -> Py<PyDecision> {
        self.decision.clone_ref(py)
    }

    /// True if the request may go on to the handler.
    #[getter]
    fn admitted(&self) -> bool {
        self.status == 200
    }

    /// 200 when admitted, else the refusal's 429 or 503.
    #[getter]
    fn status(&self) -> u16 {
        self.status
    }

    /// The headers, lower-case names: on an admission those to add to the handler's
    /// response, on a refusal the whole response's.
    #[getter]
    fn headers(&self) -> Vec<(String, String)> {
        self.headers.clone()
    }

    /// The RFC 9457 problem body of a refusal; `None` when admitted.
    #[getter]
    fn body(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        self.body.as_ref().map(|b| b.clone_ref(py))
    }

    /// The route class the request was charged to.
    #[getter]
    fn route_class(&self) -> &str {
        &self.route_class
    }

    fn __repr__(&self) -> String {
        format!(
            "HttpAnswer(status={}, route_class={:?})",
            self.status, self.route_class
        )
    }
}

/// `method` as the route table matches it.
pub(crate) fn method_of(method: &str) -> PyResult<Method> {
    Method::from_bytes(method.as_bytes())
        .map_err(|_| PyValueError::new_err(format!("{method:?} is not an HTTP method")))
}

/// Header names and values as text (every value written here is visible ASCII).
pub(crate) fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// What the tower layer does in `call`: route (or the `class` the caller chose), key, decision (and the caller's own remaining
/// tokens where the profile exposes them), then the answer.
#[allow(clippy::too_many_arguments)] // each is one part of the request; the pymethod passes them on
pub(crate) fn admit_request(
    compiled: &Compiled,
    backend: &dyn Backend,
    py: Python<'_>,
    method: &str,
    path: &str,
    caller: &Caller<'_>,
    request_id: Option<&str>,
    cost: Option<u32>,
    class: Option<RouteClass>,
) -> PyResult<Option<PyHttpAnswer>> {
    let profile = &*compiled.profile;
    let chosen;
    let (class, name, policy, limits) = match class {
        // The caller's own resolver chose the class: its policy is computed here.
        Some(class) => {
            let (name, limits) = profile
                .route_classes
                .iter()
                .nth(class.index() as usize)
                .expect("a handle of this limiter names one of its classes");
            chosen = policy_header(limits);
            (class, name, &chosen, limits)
        }
        None => {
            let method = method_of(method)?;
            // The query string is not part of the path the routes match.
            let path = path.split_once('?').map_or(path, |(p, _)| p);
            let Some(entry) = compiled.routes.classify(&method, path) else {
                return Ok(None);
            };
            (
                entry.class(),
                entry.class_name(),
                entry.policy(),
                entry.limits(),
            )
        }
    };
    let key = match *caller {
        Caller::Authenticated { tenant, principal } => key_of(tenant, principal, class)?,
        Caller::Anonymous(ip) => Key::anonymous(ip, class),
    };
    let (decision, remaining) = backend.decide(py, &key, cost, profile.expose_remaining);
    let id = request_id_or_new(request_id);
    let answer = Answer::new(decision, profile, &id)
        .with_policy(policy)
        .with_remaining(remaining, limits);
    let (status, headers, body) = match answer.refusal::<Vec<u8>>() {
        Some(response) => (
            response.status().as_u16(),
            header_pairs(response.headers()),
            Some(PyBytes::new(py, response.body()).unbind()),
        ),
        None => {
            let mut headers = HeaderMap::new();
            answer.write_headers(&mut headers);
            (200, header_pairs(&headers), None)
        }
    };
    Ok(Some(PyHttpAnswer {
        decision: backend.wrap(py, decision, class)?,
        status,
        headers,
        body,
        route_class: name.to_owned(),
    }))
}
