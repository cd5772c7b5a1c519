//! `tollgate._tollgate`: the engine, its HTTP contract and the client's retry rules, for Python.
//!
//! The Python package `tollgate` re-exports these classes and adds the ASGI and WSGI middleware
//! and the `httpx` transports, which only move bytes: every decision, header and body is made
//! here, by the same Rust code the tower layer and the demo gateway use.
//!
//! | file | idea |
//! | --- | --- |
//! | `errors` | the exception classes, and Rust errors as Python exceptions |
//! | `profile` | [`profile::PyProfile`]: a parsed, checked profile |
//! | `limiter` | [`limiter::PyLimiter`]: `admit`, `reload`, the discovery document, snapshots |
//! | `decision` | [`decision::PyDecision`] and [`decision::PyRouteClass`] |
//! | `pinned` | [`pinned::PyPinned`]: a caller resolved once for `admit_pinned` |
//! | `answer` | [`answer::PyHttpAnswer`]: one request's status, headers and problem body |
//! | `redis` | [`redis::PyRedisLimiter`]: the same decisions with the buckets in Redis |
//! | `client` | `parse_retry_after`, the retry budget, backoff and the retry loop |

#![forbid(unsafe_code)]

use pyo3::prelude::*;

mod answer;
mod client;
mod decision;
mod errors;
mod limiter;
mod pinned;
mod profile;
mod proxies;
mod redis;

#[pymodule]
fn _tollgate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<profile::PyProfile>()?;
    m.add_class::<limiter::PyLimiter>()?;
    m.add_class::<decision::PyDecision>()?;
    m.add_class::<decision::PyRouteClass>()?;
    m.add_class::<pinned::PyPinned>()?;
    m.add_class::<answer::PyHttpAnswer>()?;
    m.add_class::<redis::PyRedisLimiter>()?;
    m.add_class::<proxies::PyTrustedProxies>()?;
    client::register(m)?;
    Ok(())
}
