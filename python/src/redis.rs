//! `RedisLimiter`: the same decisions with the buckets in Redis, shared by every process that
//! connects with the same profile. Every call that talks to Redis runs on one background tokio
//! runtime with the GIL released; the store's failures are 503 decisions (fail closed), not
//! exceptions.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use tollgate::redis::RedisLimiter;
use tollgate::{Decision, Key, Remaining, RouteClass};

use crate::answer::{self, Backend, PyHttpAnswer};
use crate::decision::{PyDecision, PyRouteClass};
use crate::errors::{profile_error, TollgateError};
use crate::limiter::{
    class_arg, cost_of, ip_of, key_of, next_id, profile_arg, unknown_class, Compiled,
};

/// The runtime every Redis limiter of the process runs on (the limiter keeps a handle to it
/// for the leases it gives back in the background).
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("tollgate-redis")
        .enable_all()
        .build()
        .map_err(|e| TollgateError::new_err(format!("cannot start the Redis runtime: {e}")))?;
    Ok(RUNTIME.get_or_init(|| rt))
}

/// A limiter whose buckets live in Redis: `RedisLimiter.connect(url, profile)`.
#[pyclass(name = "RedisLimiter", module = "tollgate", frozen)]
pub struct PyRedisLimiter {
    limiter: Arc<RedisLimiter>,
    id: u64,
    compiled: ArcSwap<Compiled>,
    admitted: Py<PyDecision>,
}

impl PyRedisLimiter {
    fn compile(limiter: &RedisLimiter) -> Compiled {
        Compiled::new(limiter.profile(), |n| limiter.route_class(n))
    }

    fn class_of(&self, cls: &Bound<'_, PyAny>) -> PyResult<RouteClass> {
        class_arg(cls, self.id, |n| self.limiter.route_class(n))
    }

    fn run(&self, py: Python<'_>, key: &Key<'_>, cost: Option<u32>) -> PyResult<Decision> {
        let rt = runtime()?;
        let limiter = &self.limiter;
        Ok(py.detach(|| {
            rt.block_on(async {
                match cost {
                    None => limiter.admit(key).await,
                    Some(n) => limiter.admit_n(key, n).await,
                }
            })
        }))
    }
}

impl Backend for PyRedisLimiter {
    fn decide(
        &self,
        py: Python<'_>,
        key: &Key<'_>,
        cost: Option<u32>,
        _remaining: bool,
    ) -> (Decision, Option<Remaining>) {
        // The store's failures are decisions (503), so only a runtime that cannot start is an
        // error, and `connect` has started it already.
        let decision = self.run(py, key, cost).unwrap_or(Decision::Unavailable {
            retry_after: None,
            cause: tollgate::Cause::StoreUnavailable,
        });
        (decision, None)
    }

    fn wrap(
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

#[pymethods]
impl PyRedisLimiter {
    /// Connects to `url` (`redis://host:port/db`, `redis+cluster://...`,
    /// `redis+sentinel://...`) with `profile` (a `Profile`, a path or YAML text). The key
    /// secret is `key_secret`, else `TOLLGATE_KEY_SECRET`, else the one kept in Redis; keys
    /// start with `key_prefix`. `deny_cache` answers a throttled identity in this process
    /// until its wait is over (at most that many identities; 0: off), `replica_acks` waits for
    /// that many replicas to hold each decision's writes, `redis_module=False` decides with
    /// the Redis function even where tollgate's module is loaded. Raises `TollgateError` if the
    /// server cannot be reached within `connect_timeout` seconds.
    #[staticmethod]
    #[pyo3(signature = (url, profile, *, key_secret=None, key_prefix=None, connect_timeout=1.0, deny_cache=0, replica_acks=0, redis_module=true))]
    #[allow(clippy::too_many_arguments)]
    fn connect(
        py: Python<'_>,
        url: &str,
        profile: &Bound<'_, PyAny>,
        key_secret: Option<Vec<u8>>,
        key_prefix: Option<String>,
        connect_timeout: f64,
        deny_cache: usize,
        replica_acks: u32,
        redis_module: bool,
    ) -> PyResult<Self> {
        let profile = profile_arg(py, profile)?;
        let timeout = Duration::try_from_secs_f64(connect_timeout).map_err(|_| {
            pyo3::exceptions::PyValueError::new_err(
                "connect_timeout must be a number of seconds >= 0",
            )
        })?;
        let mut builder = RedisLimiter::builder(url, profile)
            .connect_timeout(timeout)
            .deny_cache(deny_cache)
            .replica_acks(replica_acks)
            .redis_module(redis_module);
        if let Some(s) = &key_secret {
            builder = builder.key_secret(s);
        }
        if let Some(p) = &key_prefix {
            builder = builder.key_prefix(p);
        }
        let rt = runtime()?;
        let connected = py.detach(|| rt.block_on(builder.connect()));
        let limiter = connected.map_err(|e| TollgateError::new_err(e.to_string()))?;
        let compiled = ArcSwap::from_pointee(Self::compile(&limiter));
        Ok(PyRedisLimiter {
            limiter: Arc::new(limiter),
            id: next_id(),
            compiled,
            admitted: Py::new(py, PyDecision::new(Decision::Admit, None))?,
        })
    }

    /// The handle of the route class `name`; raises `UnknownRouteClass`.
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

    /// `Limiter.admit`, decided in Redis (one round trip, the GIL released while it waits).
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
        let decision = self.run(py, &key, cost)?;
        self.wrap(py, decision, class)
    }

    /// `Limiter.admit_anonymous`, decided in Redis.
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
        let decision = self.run(py, &key, cost)?;
        self.wrap(py, decision, class)
    }

    /// `Limiter.admit_request`, decided in Redis (the `RateLimit` header of remaining tokens
    /// is not sent: the Redis backend does not read them).
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

    /// Puts `profile` in force for this process (every process sharing the store should
    /// reload the same one). A refused profile raises `ProfileError`; the old one stays.
    fn reload(&self, py: Python<'_>, profile: &Bound<'_, PyAny>) -> PyResult<()> {
        let profile = profile_arg(py, profile)?;
        self.limiter
            .reload(profile)
            .map_err(|e| profile_error(py, &e))?;
        self.compiled.store(Arc::new(Self::compile(&self.limiter)));
        Ok(())
    }

    /// Gives every lease this process holds back to the store (the unspent tokens, exactly)
    /// and returns how many tokens went back. Call it before a worker stops; the limiter stays
    /// usable. Dropping the limiter gives them back too, in the background.
    fn return_leases(&self, py: Python<'_>) -> PyResult<u64> {
        let rt = runtime()?;
        let limiter = &self.limiter;
        Ok(py.detach(|| rt.block_on(limiter.return_leases())))
    }

    /// The discovery document as a dict.
    fn published_limits<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let json = py.import("json")?;
        Ok(json
            .call_method1("loads", (self.published_limits_json(),))?
            .cast_into()?)
    }

    /// The discovery document as the JSON text the gateway serves.
    fn published_limits_json(&self) -> String {
        serde_json::to_value(self.limiter.published_limits())
            .expect("the published limits serialize")
            .to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "RedisLimiter(profile={:?})",
            self.compiled.load().profile.name
        )
    }
}
