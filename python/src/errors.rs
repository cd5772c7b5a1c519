//! The exceptions of the package, and the conversion of each Rust error into one of them,
//! carrying the Rust error's own message.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    tollgate,
    TollgateError,
    PyException,
    "The base of tollgate's own errors that are not about a bad argument."
);
create_exception!(
    tollgate,
    ProfileError,
    PyValueError,
    "A profile was refused: `kind`, `message`, `line` and `column` (None where unknown)."
);
create_exception!(
    tollgate,
    InvalidKey,
    PyValueError,
    "A tenant, principal or address that cannot be a key (empty, too long, not an IP)."
);
create_exception!(
    tollgate,
    InvalidCost,
    PyValueError,
    "A cost that is not a whole number from 0 to 2**32 - 1."
);
create_exception!(
    tollgate,
    UnknownRouteClass,
    PyKeyError,
    "The profile has no route class of that name (or the handle is another limiter's)."
);
create_exception!(
    tollgate,
    SnapshotError,
    TollgateError,
    "A snapshot could not be written, or was refused on restore."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("TollgateError", py.get_type::<TollgateError>())?;
    m.add("ProfileError", py.get_type::<ProfileError>())?;
    m.add("InvalidKey", py.get_type::<InvalidKey>())?;
    m.add("InvalidCost", py.get_type::<InvalidCost>())?;
    m.add("UnknownRouteClass", py.get_type::<UnknownRouteClass>())?;
    m.add("SnapshotError", py.get_type::<SnapshotError>())?;
    Ok(())
}

/// A [`tollgate::ProfileError`] as [`ProfileError`], with its kind, message and position as
/// attributes (the exception's text is the Rust error's `Display`).
pub(crate) fn profile_error(py: Python<'_>, e: &tollgate::ProfileError) -> PyErr {
    let err = ProfileError::new_err(e.to_string());
    let value = err.value(py);
    let kind = match e.kind() {
        tollgate::profile::ProfileErrorKind::Io => "io",
        tollgate::profile::ProfileErrorKind::Syntax => "syntax",
        tollgate::profile::ProfileErrorKind::Invalid => "invalid",
        tollgate::profile::ProfileErrorKind::Reload => "reload",
        _ => "other",
    };
    // Setting attributes on a fresh exception instance cannot fail short of memory exhaustion;
    // the error itself is still raised if it does.
    let _ = value.setattr("kind", kind);
    let _ = value.setattr("message", e.message());
    let _ = value.setattr("line", e.line());
    let _ = value.setattr("column", e.column());
    err
}

/// A [`tollgate::BuildError`]: a profile refusal stays a [`ProfileError`]; the rest (an empty
/// key secret, a table too large to allocate) are bad arguments.
pub(crate) fn build_error(py: Python<'_>, e: &tollgate::BuildError) -> PyErr {
    match e {
        tollgate::BuildError::Profile(p) => profile_error(py, p),
        tollgate::BuildError::OutOfMemory { .. } => {
            pyo3::exceptions::PyMemoryError::new_err(e.to_string())
        }
        _ => PyValueError::new_err(e.to_string()),
    }
}
