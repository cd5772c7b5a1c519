//! The limiter: `admit` from Python, reload, the discovery document and snapshots.
//!
//! `admit` holds the GIL: it is a lock-free decision of tens of nanoseconds, far shorter than
//! releasing and taking the GIL back. Building (the table is allocated and zeroed), reloading
//! (a reload may convert every slot) and snapshots run with the GIL released.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyDict, PyInt, PyString};
use tollgate::http::RouteTable;
use tollgate::{Decision, Key, Limiter, Profile, RouteClass};

use crate::answer::{self, PyHttpAnswer};
use crate::decision::{PyDecision, PyRouteClass};
use crate::errors::{
    build_error, profile_error, InvalidCost, InvalidKey, SnapshotError, UnknownRouteClass,
};
use crate::pinned::PyPinned;
use crate::profile::PyProfile;

/// Numbers limiters, so that a route class handle of one is refused by another.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The profile in force and its routes compiled, replaced whole on every reload.
pub(crate) struct Compiled {
    pub(crate) profile: Arc<Profile>,
    pub(crate) routes: RouteTable,
}

impl Compiled {
    /// `profile` with its routes compiled, class names resolved by `resolve`.
    pub(crate) fn new(
        profile: Arc<Profile>,
        resolve: impl Fn(&str) -> Option<RouteClass>,
    ) -> Compiled {
        let routes = RouteTable::compile(&profile, resolve);
        Compiled { profile, routes }
    }

    fn of(limiter: &Limiter) -> Compiled {
        Compiled::new(limiter.profile(), |n| limiter.route_class(n))
    }
}

/// The admission engine over an in-process table of token buckets. Thread-safe: share one
/// limiter between every thread and task of the process.
#[pyclass(name = "Limiter", module = "tollgate", frozen)]
pub struct PyLimiter {
    pub(crate) limiter: Arc<Limiter>,
    pub(crate) id: u64,
    pub(crate) compiled: ArcSwap<Compiled>,
    /// One reload at a time, so that the compiled routes are those of the last reload.
    reload_lock: Mutex<()>,
    /// The one `Decision` every admission returns: it carries nothing of the caller.
    admitted: Py<PyDecision>,
}

impl PyLimiter {
    fn wrap(py: Python<'_>, limiter: Limiter) -> PyResult<Self> {
        let compiled = ArcSwap::from_pointee(Compiled::of(&limiter));
        Ok(PyLimiter {
            limiter: Arc::new(limiter),
            id: next_id(),
            compiled,
            reload_lock: Mutex::new(()),
            admitted: Py::new(py, PyDecision::new(Decision::Admit, None))?,
        })
    }

    fn build(py: Python<'_>, profile: Profile, key_secret: Option<&[u8]>) -> PyResult<Self> {
        let mut builder = Limiter::builder(profile);
        if let Some(secret) = key_secret {
            builder = builder.key_secret(secret);
        }
        let built = py.detach(|| builder.build());
        let limiter = built.map_err(|e| build_error(py, &e))?;
        Self::wrap(py, limiter)
    }

    /// The handle `cls` stands for: a `RouteClass` of this limiter, or a class name.
    pub(crate) fn class_of(&self, cls: &Bound<'_, PyAny>) -> PyResult<RouteClass> {
        class_arg(cls, self.id, |n| self.limiter.route_class(n))
    }

    /// Decides `key` at `cost` and wraps the answer.
    pub(crate) fn decide(
        &self,
        py: Python<'_>,
        key: &Key<'_>,
        cost: Option<u32>,
    ) -> PyResult<Py<PyDecision>> {
        let decision = match cost {
            None => self.limiter.admit(key),
            Some(n) => self.limiter.admit_n(key, n),
        };
        self.wrap_decision(py, decision, key.class())
    }

    /// `key` pinned, with its class's name (the profile in force lists its classes in handle
    /// order).
    fn pinned(&self, key: &Key<'_>) -> PyPinned {
        let profile = self.limiter.profile();
        let (name, _) = (profile.route_classes.iter())
            .nth(key.class().index() as usize)
            .expect("a class this limiter resolved is in its profile");
        PyPinned {
            pinned: self.limiter.pin(key),
            class_name: name.to_owned(),
        }
    }

    pub(crate) fn wrap_decision(
        &self,
        py: Python<'_>,
        decision: Decision,
        class: RouteClass,
    ) -> PyResult<Py<PyDecision>> {
        if decision.is_admit() {
            return Ok(self.admitted.clone_ref(py));
        }
        Py::new(
            py,
            PyDecision::new(decision, Some((self.limiter.profile(), class))),
        )
    }
}

impl answer::Backend for PyLimiter {
    fn decide(
        &self,
        _py: Python<'_>,
        key: &Key<'_>,
        cost: Option<u32>,
        remaining: bool,
    ) -> (Decision, Option<tollgate::Remaining>) {
        let decision = match cost {
            None => self.limiter.admit(key),
            Some(n) => self.limiter.admit_n(key, n),
        };
        (decision, remaining.then(|| self.limiter.remaining(key)))
    }

    fn wrap(
        &self,
        py: Python<'_>,
        decision: Decision,
        class: RouteClass,
    ) -> PyResult<Py<PyDecision>> {
        self.wrap_decision(py, decision, class)
    }
}

/// The handle `cls` stands for: a `RouteClass` issued by the limiter numbered `limiter_id`, or
/// a class name that `resolve` knows.
pub(crate) fn class_arg(
    cls: &Bound<'_, PyAny>,
    limiter_id: u64,
    resolve: impl Fn(&str) -> Option<RouteClass>,
) -> PyResult<RouteClass> {
    if let Ok(rc) = cls.cast::<PyRouteClass>() {
        let rc = rc.get();
        if rc.limiter_id != limiter_id {
            return Err(UnknownRouteClass::new_err(format!(
                "route class {:?} is another limiter's handle",
                rc.name
            )));
        }
        return Ok(rc.class);
    }
    if let Ok(name) = cls.cast::<PyString>() {
        let name = name.to_cow()?;
        return resolve(&name).ok_or_else(|| unknown_class(&name));
    }
    Err(PyTypeError::new_err(
        "the route class must be a RouteClass or a class name",
    ))
}

/// A fresh limiter number.
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

pub(crate) fn unknown_class(name: &str) -> PyErr {
    UnknownRouteClass::new_err(format!("the profile has no route class {name:?}"))
}

/// `cost` as `admit_n` takes it: `None` is the plain `admit` (cost 1).
pub(crate) fn cost_of(cost: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u32>> {
    let Some(cost) = cost else { return Ok(None) };
    if !cost.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "cost must be an int, not {}",
            cost.get_type().name()?
        )));
    }
    match cost.extract::<i64>() {
        Ok(1) => Ok(None),
        Ok(n) => u32::try_from(n)
            .map(Some)
            .map_err(|_| bad_cost(&n.to_string())),
        Err(_) => Err(bad_cost(&cost.str()?.to_cow()?)),
    }
}

fn bad_cost(shown: &str) -> PyErr {
    InvalidCost::new_err(format!(
        "cost {shown} is not a whole number from 0 to {}",
        u32::MAX
    ))
}

/// `ip` as an address, or `InvalidKey`.
pub(crate) fn ip_of(ip: &str) -> PyResult<IpAddr> {
    ip.trim()
        .parse()
        .map_err(|_| InvalidKey::new_err(format!("{ip:?} is not an IPv4 or IPv6 address")))
}

/// An authenticated key, or `InvalidKey` with the Rust error's message.
pub(crate) fn key_of<'a>(
    tenant: &'a str,
    principal: &'a str,
    class: RouteClass,
) -> PyResult<Key<'a>> {
    Key::authenticated(tenant, principal, class).map_err(|e| InvalidKey::new_err(e.to_string()))
}

#[pymethods]
impl PyLimiter {
    /// A limiter over `profile` (a `Profile`, or what `Limiter.from_yaml` takes). `key_secret`
    /// (bytes) keys the identity digests: needed to snapshot and restore, and to share a
    /// table's meaning across restarts; a random one is drawn otherwise.
    #[new]
    #[pyo3(signature = (profile, *, key_secret=None))]
    fn new(
        py: Python<'_>,
        profile: &Bound<'_, PyAny>,
        key_secret: Option<Vec<u8>>,
    ) -> PyResult<Self> {
        let profile = profile_arg(py, profile)?;
        Self::build(py, profile, key_secret.as_deref())
    }

    /// A limiter from a profile's path (a path-like object, or a string without a line
    /// break) or its YAML text.
    #[staticmethod]
    #[pyo3(signature = (path_or_text, *, key_secret=None))]
    fn from_yaml(
        py: Python<'_>,
        path_or_text: &Bound<'_, PyAny>,
        key_secret: Option<Vec<u8>>,
    ) -> PyResult<Self> {
        let profile = PyProfile::load(py, path_or_text)?;
        Self::build(py, profile, key_secret.as_deref())
    }

    /// A limiter over `profile` with the bucket state of the snapshot at `path` (written by
    /// `snapshot` under the same `key_secret`). A refused snapshot raises `SnapshotError`
    /// with the reason; nothing is built.
    #[staticmethod]
    #[pyo3(signature = (profile, path, *, key_secret))]
    fn restore(
        py: Python<'_>,
        profile: &Bound<'_, PyAny>,
        path: PathBuf,
        key_secret: Vec<u8>,
    ) -> PyResult<Self> {
        let profile = profile_arg(py, profile)?;
        let builder = Limiter::builder(profile).key_secret(&key_secret);
        let restored = py.detach(|| {
            let file = std::fs::File::open(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            builder
                .restore(file)
                .map(|(limiter, _stats)| limiter)
                .map_err(|e| format!("snapshot {} refused: {e}", path.display()))
        });
        let limiter = restored.map_err(SnapshotError::new_err)?;
        Self::wrap(py, limiter)
    }

    /// Writes the bucket state to `path` crash-safely (a temporary file renamed over it);
    /// returns how many identities were written. Needs a limiter built with `key_secret`.
    fn snapshot(&self, py: Python<'_>, path: PathBuf) -> PyResult<u64> {
        let limiter = &self.limiter;
        let saved = py.detach(|| limiter.save(&path));
        saved.map(|s| s.identities).map_err(|e| {
            SnapshotError::new_err(format!("cannot snapshot to {}: {e}", path.display()))
        })
    }

    /// The handle of the route class `name`; raises `UnknownRouteClass` (a `KeyError`).
    fn route_class(&self, name: &str) -> PyResult<PyRouteClass> {
        let class = self
            .limiter
            .route_class(name)
            .ok_or_else(|| unknown_class(name))?;
        Ok(PyRouteClass {
            class,
            limiter_id: self.id,
            name: name.to_owned(),
        })
    }

    /// Decides one request of an authenticated caller and charges it if admitted: `cost`
    /// tokens from each of its two buckets, all or nothing (`cost=0` checks, charging
    /// nothing). `cls` is a `RouteClass` (resolve it once) or a class name.
    #[pyo3(signature = (tenant, principal, cls, cost=None))]
    fn admit(
        &self,
        py: Python<'_>,
        tenant: PyBackedStr,
        principal: PyBackedStr,
        cls: &Bound<'_, PyAny>,
        cost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDecision>> {
        let class = self.class_of(cls)?;
        let cost = cost_of(cost)?;
        let key = key_of(&tenant, &principal, class)?;
        self.decide(py, &key, cost)
    }

    /// Decides one request of an unauthenticated caller, charged to its network prefix
    /// (`anonymous.ipv4_prefix` / `ipv6_prefix` of the profile).
    #[pyo3(signature = (ip, cls, cost=None))]
    fn admit_anonymous(
        &self,
        py: Python<'_>,
        ip: &str,
        cls: &Bound<'_, PyAny>,
        cost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDecision>> {
        let class = self.class_of(cls)?;
        let cost = cost_of(cost)?;
        let key = Key::anonymous(ip_of(ip)?, class);
        self.decide(py, &key, cost)
    }

    /// An authenticated caller resolved for repeated decisions (`admit_pinned`): the key
    /// checked and hashed once. Raises as `admit` does for a bad key or class.
    fn pin(
        &self,
        tenant: PyBackedStr,
        principal: PyBackedStr,
        cls: &Bound<'_, PyAny>,
    ) -> PyResult<PyPinned> {
        let class = self.class_of(cls)?;
        Ok(self.pinned(&key_of(&tenant, &principal, class)?))
    }

    /// `pin` for an unauthenticated caller, keyed by its network prefix as
    /// `admit_anonymous` keys it.
    fn pin_anonymous(&self, ip: &str, cls: &Bound<'_, PyAny>) -> PyResult<PyPinned> {
        let class = self.class_of(cls)?;
        Ok(self.pinned(&Key::anonymous(ip_of(ip)?, class)))
    }

    /// Decides one request of a pinned caller and charges it if admitted: the decision
    /// `admit` would give for the key it was pinned with, at cost 1. A pin of another limiter
    /// raises `InvalidKey`, and nothing is charged.
    fn admit_pinned(&self, py: Python<'_>, pinned: &PyPinned) -> PyResult<Py<PyDecision>> {
        let pinned = &pinned.pinned;
        if !pinned.belongs_to(&self.limiter) {
            return Err(InvalidKey::new_err("the pin is another limiter's"));
        }
        let decision = self.limiter.admit_pinned(pinned);
        self.wrap_decision(py, decision, pinned.route_class())
    }

    /// One HTTP request, as the tower layer and the demo gateway decide it: the route class
    /// from the profile's `routes` (`None` when no route matches: not limited), the caller
    /// (`tenant` and `principal`, or the anonymous `peer` address), and the answer's status,
    /// headers and, for a refusal, the RFC 9457 body. `request_id` is the request's
    /// `X-Request-Id`, kept if well-formed. `cls` charges that route class instead of the
    /// one the routes give (then every request is limited).
    #[pyo3(signature = (method, path, *, tenant=None, principal=None, peer=None, request_id=None, cost=None, cls=None))]
    #[allow(clippy::too_many_arguments)]
    fn admit_request(
        &self,
        py: Python<'_>,
        method: &str,
        path: &str,
        tenant: Option<PyBackedStr>,
        principal: Option<PyBackedStr>,
        peer: Option<&str>,
        request_id: Option<&str>,
        cost: Option<&Bound<'_, PyAny>>,
        cls: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<PyHttpAnswer>> {
        let cost = cost_of(cost)?;
        let class = cls.map(|c| self.class_of(c)).transpose()?;
        let caller = answer::Caller::new(tenant.as_deref(), principal.as_deref(), peer)?;
        answer::admit_request(
            &self.compiled.load(),
            self,
            py,
            method,
            path,
            &caller,
            request_id,
            cost,
            class,
        )
    }

    /// The route class the profile's `routes` give `method` and `path`; `None` when no route
    /// matches.
    fn classify(&self, method: &str, path: &str) -> PyResult<Option<PyRouteClass>> {
        let compiled = self.compiled.load();
        let method = answer::method_of(method)?;
        Ok(compiled
            .routes
            .classify(&method, path)
            .map(|e| PyRouteClass {
                class: e.class(),
                limiter_id: self.id,
                name: e.class_name().to_owned(),
            }))
    }

    /// Puts `profile` (a `Profile`, a path or YAML text) in force without losing any bucket
    /// state. A refused profile raises `ProfileError` and the old one stays in force.
    fn reload(&self, py: Python<'_>, profile: &Bound<'_, PyAny>) -> PyResult<()> {
        let profile = profile_arg(py, profile)?;
        let limiter = &self.limiter;
        let compiled = &self.compiled;
        let lock = &self.reload_lock;
        let reloaded = py.detach(|| {
            let _one = lock.lock().unwrap_or_else(PoisonError::into_inner);
            limiter.reload(profile)?;
            compiled.store(Arc::new(Compiled::of(limiter)));
            Ok(())
        });
        reloaded.map_err(|e| profile_error(py, &e))
    }

    /// The discovery document (what the gateway serves at `/.well-known/rate-limits`), as
    /// a dict: per route class its buckets, mode and routes, the Retry-After cap, the catalog
    /// and the capacity window. Nothing about any tenant.
    fn published_limits<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let text = self.published_limits_json();
        let json = py.import("json")?;
        Ok(json.call_method1("loads", (text,))?.cast_into::<PyDict>()?)
    }

    /// The discovery document as the JSON text the gateway serves.
    fn published_limits_json(&self) -> String {
        let value = serde_json::to_value(self.limiter.published_limits())
            .expect("the published limits serialize");
        value.to_string()
    }

    /// The profile in force.
    #[getter]
    fn profile(&self) -> PyProfile {
        PyProfile {
            inner: self.limiter.profile(),
        }
    }

    /// Identity slots in the table.
    #[getter]
    fn capacity(&self) -> usize {
        self.limiter.capacity()
    }

    /// Bytes held by the limiter.
    #[getter]
    fn memory_bytes(&self) -> usize {
        self.limiter.memory_bytes()
    }

    fn __repr__(&self) -> String {
        format!(
            "Limiter(profile={:?}, capacity={})",
            self.compiled.load().profile.name,
            self.limiter.capacity()
        )
    }
}

/// A profile argument: a `Profile`, or a path or YAML text.
pub(crate) fn profile_arg(py: Python<'_>, profile: &Bound<'_, PyAny>) -> PyResult<Profile> {
    if let Ok(p) = profile.cast::<PyProfile>() {
        return Ok(Profile::clone(&p.get().inner));
    }
    PyProfile::load(py, profile)
}
