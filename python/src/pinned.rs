//! Pinned callers: a key resolved once (its digests computed, its slot looked up) for a caller
//! that decides many times for the same identity, a session or a connection.

use pyo3::prelude::*;
use tollgate::Pinned;

/// One caller of one limiter, from `Limiter.pin` or `Limiter.pin_anonymous`: decide with
/// `Limiter.admit_pinned`, which gives the decision `admit` would, without converting or hashing
/// the key again. Holds digests, never the tenant's or principal's strings. Stays valid across
/// reloads; pin again after one to make its decisions as cheap as before.
#[pyclass(name = "Pinned", module = "tollgate", frozen)]
pub struct PyPinned {
    pub(crate) pinned: Pinned,
    /// The route class's name, for `repr` and `route_class`.
    pub(crate) class_name: String,
}

#[pymethods]
impl PyPinned {
    /// The name of the route class the pin decides for.
    #[getter]
    fn route_class(&self) -> &str {
        &self.class_name
    }

    /// Names the route class only: a pin shows nothing of its caller.
    fn __repr__(&self) -> String {
        format!("Pinned(route_class={:?})", self.class_name)
    }
}
