//! The request id: one id per request, the same in the caller's logs, ours and the problem body.

use core::fmt;

use ::http::header::{HeaderMap, HeaderValue};

use super::headers::X_REQUEST_ID;

/// The longest request id taken from a caller.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// A request id: 1 to [`MAX_REQUEST_ID_LEN`] characters of `A-Z a-z 0-9 . _ -`.
///
/// The caller's own `X-Request-Id` is kept when it has that form, so that its logs and ours
/// agree; anything else (empty, too long, other characters, several values) is replaced by a
/// generated id, so that nothing a caller sends is reflected into headers or bodies unchecked.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(HeaderValue);

impl RequestId {
    /// The id if `s` is well-formed.
    pub fn parse(s: &str) -> Option<RequestId> {
        let ok = (1..=MAX_REQUEST_ID_LEN).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            HeaderValue::from_str(s).ok().map(RequestId)
        } else {
            None
        }
    }

    /// A fresh random id: 32 lower-case hex digits (128 bits), unique enough to find one request.
    pub fn generate() -> RequestId {
        let text = format!("{:032x}", fastrand::u128(..));
        RequestId(HeaderValue::try_from(text).expect("hex digits are a valid header value"))
    }

    /// The request's own `X-Request-Id` if it sent exactly one well-formed value, else a fresh one.
    pub fn from_headers(headers: &HeaderMap) -> RequestId {
        let mut values = headers.get_all(X_REQUEST_ID).iter();
        match (values.next(), values.next()) {
            (Some(v), None) => v.to_str().ok().and_then(RequestId::parse),
            _ => None,
        }
        .unwrap_or_else(RequestId::generate)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        // Only ever built from checked ASCII or hex digits.
        self.0.to_str().unwrap_or_default()
    }

    /// The id as a header value, ready to insert.
    pub fn header_value(&self) -> &HeaderValue {
        &self.0
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RequestId").field(&self.as_str()).finish()
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
