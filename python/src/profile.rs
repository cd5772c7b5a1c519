//! A parsed and checked profile, shared (it is immutable) by every limiter built from it.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use tollgate::Profile;

use crate::errors::profile_error;

/// A profile parsed from YAML and checked: `Profile.from_yaml(text)` or
/// `Profile.from_path(path)`. A refused one raises `ProfileError` with line and column.
#[pyclass(name = "Profile", module = "tollgate", frozen)]
pub struct PyProfile {
    pub(crate) inner: Arc<Profile>,
}

impl PyProfile {
    /// Reads `source`: a path-like object or a string without a line break is a file's path,
    /// any other string is the YAML itself.
    pub(crate) fn load(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<Profile> {
        let parsed = if let Ok(text) = source.extract::<String>() {
            if text.contains('\n') {
                py.detach(|| Profile::from_yaml(&text))
            } else {
                py.detach(|| Profile::from_path(&text))
            }
        } else {
            let path: PathBuf = source.extract()?;
            py.detach(|| Profile::from_path(&path))
        };
        parsed.map_err(|e| profile_error(py, &e))
    }
}

#[pymethods]
impl PyProfile {
    /// Parses `text` as a profile.
    #[staticmethod]
    fn from_yaml(py: Python<'_>, text: &str) -> PyResult<Self> {
        let parsed = py.detach(|| Profile::from_yaml(text));
        parsed
            .map(|p| PyProfile { inner: Arc::new(p) })
            .map_err(|e| profile_error(py, &e))
    }

    /// Reads and parses the profile at `path`.
    #[staticmethod]
    fn from_path(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let parsed = py.detach(|| Profile::from_path(&path));
        parsed
            .map(|p| PyProfile { inner: Arc::new(p) })
            .map_err(|e| profile_error(py, &e))
    }

    /// The profile's `name`.
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// The route classes, in the profile's order.
    #[getter]
    fn route_classes(&self) -> Vec<String> {
        self.inner
            .route_classes
            .iter()
            .map(|(n, _)| n.to_owned())
            .collect()
    }

    fn __repr__(&self) -> String {
        format!("Profile(name={:?})", self.inner.name)
    }
}
