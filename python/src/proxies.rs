//! Which address an anonymous request is charged to behind proxies: the rule of the Rust
//! `PeerExtractor` (the rightmost forwarded-for address that is not a trusted proxy), for the
//! ASGI and WSGI middleware.

use std::net::IpAddr;

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tollgate::http::{Cidr, ForwardedHeader, PeerExtractor};

use crate::limiter::ip_of;

/// The proxy networks whose `X-Forwarded-For` (or RFC 7239 `Forwarded`) entries are believed.
/// Entries left of the rightmost untrusted address were written by the client and are ignored,
/// so a spoofed header changes nothing; a peer outside these networks is the client itself.
#[pyclass(name = "TrustedProxies", module = "tollgate", frozen)]
pub struct PyTrustedProxies {
    extractor: PeerExtractor,
    /// The header read, lower case, as the middleware look it up.
    header: &'static str,
}

#[pymethods]
impl PyTrustedProxies {
    /// `networks` such as `"10.0.0.0/8"` or `"127.0.0.1"`; `header` is the one the proxies
    /// append to: `"x-forwarded-for"` (the default) or `"forwarded"`.
    #[new]
    #[pyo3(signature = (networks, header = "x-forwarded-for"))]
    fn new(networks: Vec<String>, header: &str) -> PyResult<Self> {
        let (kind, header) = match header.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => (ForwardedHeader::XForwardedFor, "x-forwarded-for"),
            "forwarded" => (ForwardedHeader::Forwarded, "forwarded"),
            other => {
                return Err(PyValueError::new_err(format!(
                    "header {other:?}: expected \"x-forwarded-for\" or \"forwarded\""
                )))
            }
        };
        let networks = networks
            .iter()
            .map(|n| n.parse::<Cidr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyTrustedProxies {
            extractor: PeerExtractor::new()
                .forwarded_header(kind)
                .trust_proxies(networks),
            header,
        })
    }

    /// The header the proxies append to, lower case.
    #[getter]
    fn header(&self) -> &'static str {
        self.header
    }

    /// The client address of a request from `peer` that carried `values` of the header (one
    /// string per header line, in order). Values that are not valid header text are ignored.
    fn client_ip(&self, peer: &str, values: Vec<String>) -> PyResult<String> {
        let peer: IpAddr = ip_of(peer)?;
        let name = HeaderName::from_static(self.header);
        let mut headers = HeaderMap::new();
        for v in &values {
            if let Ok(v) = HeaderValue::from_str(v) {
                headers.append(name.clone(), v);
            }
        }
        Ok(self.extractor.client_ip(peer, &headers).to_string())
    }

    fn __repr__(&self) -> String {
        format!("TrustedProxies(header={:?})", self.header)
    }
}
