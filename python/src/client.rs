//! The client side (`tollgate-client`) for Python callers: `Retry-After` parsing, the shared
//! retry budget, capped backoff with jitter, and the retry loop itself, run here on the Rust
//! loop so that Python callers follow exactly the rules Rust callers do.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::StatusCode;
use pyo3::exceptions::{PyTimeoutError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tollgate_client::{
    execute, Backoff, Call, Jitter, Last, ResponseMeta, RetryBudget, RetryPolicy, TransportError,
};

use crate::errors::TollgateError;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parse_retry_after, m)?)?;
    m.add_function(wrap_pyfunction!(is_idempotent, m)?)?;
    m.add_class::<PyRetryBudget>()?;
    m.add_class::<PyBackoff>()?;
    m.add_class::<PyRetryPolicy>()?;
    m.add_class::<PyRetryOutcome>()?;
    Ok(())
}

/// `secs` (from Python) as a duration, refusing negative, NaN and infinite values.
fn duration(what: &str, secs: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a finite number of seconds >= 0, not {secs}"
        ))
    })
}

fn wall(now: Option<f64>) -> PyResult<SystemTime> {
    match now {
        None => Ok(SystemTime::now()),
        Some(t) => Ok(UNIX_EPOCH + duration("now", t)?),
    }
}

/// The wait a `Retry-After` value asks for, in seconds: delay-seconds or an HTTP-date (all
/// three forms), measured from the response's `date` when given (so a client's clock skew
/// cancels) and `now` (Unix seconds; the wall clock by default). `None` for an invalid value.
#[pyfunction]
#[pyo3(signature = (value, *, date=None, now=None))]
fn parse_retry_after(value: &str, date: Option<&str>, now: Option<f64>) -> PyResult<Option<f64>> {
    let now = wall(now)?;
    Ok(tollgate_client::parse_retry_after_dated(value, date, now).map(|d| d.as_secs_f64()))
}

/// RFC 9110 idempotent methods (GET, HEAD, OPTIONS, TRACE, PUT, DELETE): what may be
/// repeated after it may have been executed, without an `Idempotency-Key`.
#[pyfunction]
fn is_idempotent(method: &str) -> PyResult<bool> {
    Ok(tollgate_client::is_idempotent(&crate::answer::method_of(
        method,
    )?))
}

/// Retries shared by every request of one client: at most `ratio` of the recent requests
/// (over `ttl` seconds) plus `min_per_sec` per second, so that many callers hitting one
/// outage do not multiply its load. Thread-safe.
#[pyclass(name = "RetryBudget", module = "tollgate", frozen)]
pub struct PyRetryBudget {
    inner: RetryBudget,
}

#[pymethods]
impl PyRetryBudget {
    #[new]
    #[pyo3(signature = (ttl=10.0, min_per_sec=10, ratio=0.2))]
    fn new(ttl: f64, min_per_sec: u32, ratio: f64) -> PyResult<Self> {
        Ok(PyRetryBudget {
            inner: RetryBudget::new(duration("ttl", ttl)?, min_per_sec, ratio),
        })
    }

    /// Records one logical request (earns `ratio` of a retry).
    fn deposit(&self) {
        self.inner.deposit();
    }

    /// Takes one retry if the budget has one.
    fn try_withdraw(&self) -> bool {
        self.inner.try_withdraw()
    }

    /// Whole retries available now.
    #[getter]
    fn available(&self) -> u64 {
        self.inner.available()
    }
}

/// Capped exponential backoff with jitter (`"full"`, `"equal"`, `"decorrelated"`, `"none"`):
/// the wait before a retry when the server said nothing.
#[pyclass(name = "Backoff", module = "tollgate", frozen)]
pub struct PyBackoff {
    inner: Backoff,
    rng: Mutex<fastrand::Rng>,
}

fn jitter_of(name: &str) -> PyResult<Jitter> {
    Ok(match name {
        "full" => Jitter::Full,
        "equal" => Jitter::Equal,
        "decorrelated" => Jitter::Decorrelated,
        "none" => Jitter::None,
        other => {
            return Err(PyValueError::new_err(format!(
                "jitter {other:?} is not one of full, equal, decorrelated, none"
            )))
        }
    })
}

#[pymethods]
impl PyBackoff {
    /// From `base` seconds doubling up to `cap`, never below `floor`; `seed` makes the jitter
    /// reproducible.
    #[new]
    #[pyo3(signature = (base=0.1, cap=10.0, *, floor=0.01, jitter="full", seed=None))]
    fn new(base: f64, cap: f64, floor: f64, jitter: &str, seed: Option<u64>) -> PyResult<Self> {
        let inner = Backoff::new(duration("base", base)?, duration("cap", cap)?)
            .with_floor(duration("floor", floor)?)
            .with_jitter(jitter_of(jitter)?);
        let rng = seed.map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed);
        Ok(PyBackoff {
            inner,
            rng: Mutex::new(rng),
        })
    }

    /// The wait before retry number `retry` (0 for the first), in seconds; `prev` is the
    /// previous wait (decorrelated jitter grows from it).
    #[pyo3(signature = (retry, prev=None))]
    fn delay(&self, retry: u32, prev: Option<f64>) -> PyResult<f64> {
        let prev = match prev {
            Some(p) => duration("prev", p)?,
            None => self.inner.base(),
        };
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(self.inner.delay(retry, prev, &mut rng).as_secs_f64())
    }

    /// `min(cap, base * 2**retry)`, before jitter.
    fn exponential(&self, retry: u32) -> f64 {
        self.inner.exponential(retry).as_secs_f64()
    }
}

/// One attempt's response as the Rust loop reads it, holding the Python response.
struct PyResponse {
    obj: Py<PyAny>,
    status: StatusCode,
    retry_after: Option<String>,
    date: Option<String>,
}

impl ResponseMeta for PyResponse {
    fn status(&self) -> StatusCode {
        self.status
    }

    fn retry_after(&self) -> Option<&str> {
        self.retry_after.as_deref()
    }

    fn date(&self) -> Option<&str> {
        self.date.as_deref()
    }
}

/// Reads `status_code` and the `Retry-After` and `Date` headers of what `send` returned.
fn read_response(obj: Bound<'_, PyAny>) -> PyResult<PyResponse> {
    let code: u16 = obj.getattr("status_code")?.extract()?;
    let status = StatusCode::from_u16(code)
        .map_err(|_| PyValueError::new_err(format!("{code} is not an HTTP status")))?;
    let headers = obj.getattr("headers")?;
    let header = |name: &str| -> PyResult<Option<String>> {
        headers.call_method1("get", (name,))?.extract()
    };
    Ok(PyResponse {
        retry_after: header("retry-after")?,
        date: header("date")?,
        status,
        obj: obj.unbind(),
    })
}

/// How one logical request ended: the last `response` (`None` if the last attempt got
/// none), the `attempts` made, and, if the loop gave up rather than succeeding, why
/// (`give_up`: `deadline`, `wait_too_long`, `budget`, `attempts`, `non_retryable`) and the
/// wait that could not be honoured (`wait`, seconds, for `deadline` and `wait_too_long`).
#[pyclass(name = "RetryOutcome", module = "tollgate", frozen, get_all)]
pub struct PyRetryOutcome {
    response: Option<Py<PyAny>>,
    attempts: u32,
    give_up: Option<&'static str>,
    wait: Option<f64>,
}

/// The retry rules of one client: attempts, one deadline over every attempt and wait, each
/// attempt's timeout, the longest single wait, the backoff, and the server's `Retry-After`
/// first (plus 10 % jitter, at least 1 s). Retries 429, 502, 503 and 504 of requests that may
/// be repeated (idempotent, or with an idempotency key); a request that never left always.
#[pyclass(name = "RetryPolicy", module = "tollgate", frozen)]
pub struct PyRetryPolicy {
    inner: RetryPolicy,
}

#[pymethods]
impl PyRetryPolicy {
    #[new]
    #[pyo3(signature = (*, max_attempts=4, deadline=Some(30.0), attempt_timeout=Some(10.0), max_wait=60.0, backoff=None))]
    fn new(
        max_attempts: u32,
        deadline: Option<f64>,
        attempt_timeout: Option<f64>,
        max_wait: f64,
        backoff: Option<PyRef<'_, PyBackoff>>,
    ) -> PyResult<Self> {
        let mut inner = RetryPolicy::new()
            .max_attempts(max_attempts)
            .deadline(deadline.map(|d| duration("deadline", d)).transpose()?)
            .attempt_timeout(
                attempt_timeout
                    .map(|d| duration("attempt_timeout", d))
                    .transpose()?,
            )
            .max_wait(duration("max_wait", max_wait)?);
        if let Some(b) = backoff {
            inner = inner.backoff(b.inner);
        }
        Ok(PyRetryPolicy { inner })
    }

    /// Runs one logical request: calls `send(attempt, timeout, idempotency_key)` for each
    /// attempt (`attempt` from 1, `timeout` in seconds or `None`), which returns a response
    /// with `status_code` and `headers`, or raises. An exception that is an instance of
    /// `not_sent` proves the request never left (a refused connection): it is retried whatever
    /// the method; any other is retried only where the request may be repeated. Waits sleep
    /// with the GIL released. An exception of the last attempt is raised again.
    #[pyo3(signature = (budget, method, send, *, idempotency_key=None, not_sent=None))]
    fn run(
        &self,
        py: Python<'_>,
        budget: &PyRetryBudget,
        method: &str,
        send: Py<PyAny>,
        idempotency_key: Option<String>,
        not_sent: Option<Py<PyAny>>,
    ) -> PyResult<PyRetryOutcome> {
        if !send.bind(py).is_callable() {
            return Err(PyTypeError::new_err("send must be callable"));
        }
        let not_sent = match not_sent {
            Some(t) => t,
            None => PyTuple::empty(py).into_any().unbind(),
        };
        let mut call = Call::new(crate::answer::method_of(method)?);
        if let Some(k) = idempotency_key {
            call = call.idempotency_key(k);
        }
        let policy = &self.inner;
        let budget = &budget.inner;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| TollgateError::new_err(format!("cannot start the retry timer: {e}")))?;
        let mut made = 0u32;
        let result = py.detach(|| {
            runtime.block_on(execute(policy, budget, call, |attempt| {
                made = attempt.number;
                let sent = Python::attach(|py| {
                    let timeout = attempt.timeout.map(|t| t.as_secs_f64());
                    let key = attempt.idempotency_key.as_deref();
                    send.bind(py)
                        .call1((attempt.number, timeout, key))
                        .and_then(read_response)
                        .map_err(|e| {
                            if e.is_instance(py, not_sent.bind(py)) {
                                TransportError::not_sent(e)
                            } else {
                                TransportError::sent_no_response(e)
                            }
                        })
                });
                std::future::ready(sent)
            }))
        });
        match result {
            Ok(r) => Ok(PyRetryOutcome {
                response: Some(r.obj),
                attempts: made,
                give_up: None,
                wait: None,
            }),
            Err(e) => {
                let give_up = Some(e.reason.as_str());
                let wait = e.reason.wait().map(|w| w.as_secs_f64());
                let attempts = e.attempts;
                match e.last {
                    Some(Last::Response(r)) => Ok(PyRetryOutcome {
                        response: Some(r.obj),
                        attempts,
                        give_up,
                        wait,
                    }),
                    Some(Last::Transport(t)) => Err(t.error),
                    Some(Last::TimedOut(t)) => Err(PyTimeoutError::new_err(format!(
                        "no response within {:.3} s",
                        t.as_secs_f64()
                    ))),
                    None => Ok(PyRetryOutcome {
                        response: None,
                        attempts,
                        give_up,
                        wait,
                    }),
                }
            }
        }
    }
}
