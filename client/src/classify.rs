//! What an attempt's outcome means for the retry loop: success, retry, or final.
//!
//! Three inputs decide: the status (or how the transport failed), whether the method is
//! idempotent, and whether the request carries an `Idempotency-Key`. Retrying what the server may
//! already have executed duplicates side effects, so a non-idempotent request without a key is
//! retried only when it provably never left.

use std::fmt;

use http::{Method, StatusCode};

/// How far a failed attempt got, which decides whether repeating it can duplicate an effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SendState {
    /// The request never reached the server (connect refused, DNS failure, no route): always
    /// safe to retry, whatever the method.
    NotSent,
    /// The request may have been sent and executed, but no response came (timeout, reset):
    /// retried only for idempotent methods or requests with an `Idempotency-Key`.
    SentNoResponse,
}

/// A transport failure of one attempt, marked with how far it got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportError<E> {
    /// Whether the request may have reached the server.
    pub state: SendState,
    /// The client's own error.
    pub error: E,
}

impl<E> TransportError<E> {
    /// The request never left: retry is safe.
    pub fn not_sent(error: E) -> Self {
        TransportError {
            state: SendState::NotSent,
            error,
        }
    }

    /// The request may have been executed: retry only if idempotent or keyed.
    pub fn sent_no_response(error: E) -> Self {
        TransportError {
            state: SendState::SentNoResponse,
            error,
        }
    }
}

impl<E: fmt::Display> fmt::Display for TransportError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.state {
            SendState::NotSent => write!(f, "request not sent: {}", self.error),
            SendState::SentNoResponse => write!(f, "no response: {}", self.error),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for TransportError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Reads a client's response type without owning it: the status and the raw `Retry-After`.
///
/// Implemented for `http::Response<B>` and `http::StatusCode` (no headers); implement it for a
/// client's own response type to use [`execute`](super::execute) with that client.
pub trait ResponseMeta {
    /// The HTTP status.
    fn status(&self) -> StatusCode;
    /// The `Retry-After` value, if present. A value that is not visible ASCII should be returned
    /// as `Some("")` so it counts as invalid.
    fn retry_after(&self) -> Option<&str>;
    /// The response's own `Date` (the server's clock), if present: an HTTP-date `Retry-After`
    /// is measured from it, so a client whose wall clock is off still waits what the server
    /// meant. The default, `None`, measures from the client's wall clock.
    fn date(&self) -> Option<&str> {
        None
    }
}

impl<B> ResponseMeta for http::Response<B> {
    fn status(&self) -> StatusCode {
        http::Response::status(self)
    }

    fn retry_after(&self) -> Option<&str> {
        self.headers()
            .get(http::header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap_or(""))
    }

    fn date(&self) -> Option<&str> {
        self.headers()
            .get(http::header::DATE)
            .and_then(|v| v.to_str().ok())
    }
}

impl ResponseMeta for StatusCode {
    fn status(&self) -> StatusCode {
        *self
    }

    fn retry_after(&self) -> Option<&str> {
        None
    }
}

/// How [`Classifier`] classifies one attempt's outcome, and so what the retry loop does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classification {
    /// Done: 1xx, 2xx, 3xx.
    Success,
    /// Worth another attempt (after a wait), if attempts, budget and deadline allow.
    Retry,
    /// Final failure: repeating cannot help or is unsafe.
    Final,
}

/// RFC 9110 section 9.2.2 idempotent methods: GET, HEAD, OPTIONS, TRACE, PUT, DELETE.
///
/// Anything else (POST, PATCH, CONNECT, extension methods) needs an `Idempotency-Key` to be
/// retried after it may have been sent.
pub fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Which statuses are retryable; the method and key rules are fixed.
///
/// Default: 429 and 503 (the server says "later"), 502 and 504 (a proxy could not reach a
/// healthy upstream; usually transient). 500 is **not** retried by default: it usually means a
/// bug that the same request will hit again, and retrying it only multiplies load. 409 is retried
/// only for a request with an `Idempotency-Key` (the server's "a request with this key is still
/// in progress"); every other 4xx is final.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classifier {
    retryable: Vec<StatusCode>,
    retry_409_with_key: bool,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier {
            retryable: vec![
                StatusCode::TOO_MANY_REQUESTS,
                StatusCode::BAD_GATEWAY,
                StatusCode::SERVICE_UNAVAILABLE,
                StatusCode::GATEWAY_TIMEOUT,
            ],
            retry_409_with_key: true,
        }
    }
}

impl Classifier {
    /// Also retries `status` (e.g. 500, or 408).
    pub fn retry_status(mut self, status: StatusCode) -> Self {
        if !self.retryable.contains(&status) {
            self.retryable.push(status);
        }
        self
    }

    /// Stops retrying `status` (e.g. 502 behind a proxy that reports real upstream bugs).
    pub fn no_retry_status(mut self, status: StatusCode) -> Self {
        self.retryable.retain(|s| *s != status);
        self
    }

    /// Whether a 409 on a request with an `Idempotency-Key` waits and retries (default `true`).
    pub fn retry_conflict_with_key(mut self, yes: bool) -> Self {
        self.retry_409_with_key = yes;
        self
    }

    /// Whether `status` is in the retryable set (method and key not considered).
    pub fn is_retryable_status(&self, status: StatusCode) -> bool {
        self.retryable.contains(&status)
    }

    /// The classification of a response with `status` to a request with `method`, keyed or not.
    pub fn response(&self, status: StatusCode, method: &Method, has_key: bool) -> Classification {
        if !(status.is_client_error() || status.is_server_error()) {
            return Classification::Success;
        }
        let may_repeat = has_key || is_idempotent(method);
        let retryable = self.is_retryable_status(status)
            || (status == StatusCode::CONFLICT && has_key && self.retry_409_with_key);
        if retryable && may_repeat {
            Classification::Retry
        } else {
            Classification::Final
        }
    }

    /// The classification of a transport failure: a request that never left is always retried.
    pub fn transport(&self, state: SendState, method: &Method, has_key: bool) -> Classification {
        match state {
            SendState::NotSent => Classification::Retry,
            SendState::SentNoResponse if has_key || is_idempotent(method) => Classification::Retry,
            SendState::SentNoResponse => Classification::Final,
        }
    }
}

/// A default for tower users: walks the error's `source()` chain for an `io::Error` that proves
/// the request never left (`ConnectionRefused`, `AddrNotAvailable`, `NotConnected`); anything else
/// is [`SendState::SentNoResponse`] (the safe assumption).
///
/// hyper-util's legacy client knows better: `Error::is_connect()` is true for DNS and connect
/// failures, so prefer `|e| if e.is_connect() { NotSent } else { SentNoResponse }` there.
pub fn send_state_from_io(error: &(dyn std::error::Error + 'static)) -> SendState {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(
                io.kind(),
                ConnectionRefused | AddrNotAvailable | NotConnected
            ) {
                return SendState::NotSent;
            }
        }
        cur = e.source();
    }
    SendState::SentNoResponse
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_table() {
        let c = Classifier::default();
        let get = Method::GET;
        let post = Method::POST;
        use Classification::*;
        for (status, method, key, want) in [
            (200, &get, false, Success),
            (304, &get, false, Success),
            (429, &get, false, Retry),
            (503, &get, false, Retry),
            (502, &get, false, Retry),
            (504, &get, false, Retry),
            (500, &get, false, Final),
            (404, &get, false, Final),
            (400, &get, false, Final),
            (409, &get, false, Final),
            (409, &post, true, Retry),
            (429, &post, false, Final),
            (429, &post, true, Retry),
            (503, &Method::PATCH, false, Final),
            (503, &Method::PUT, false, Retry),
            (503, &Method::DELETE, false, Retry),
        ] {
            let s = StatusCode::from_u16(status).unwrap();
            assert_eq!(
                c.response(s, method, key),
                want,
                "{status} {method} key={key}"
            );
        }
        let c = c.retry_status(StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            c.response(StatusCode::INTERNAL_SERVER_ERROR, &get, false),
            Retry
        );
        let c = c.no_retry_status(StatusCode::BAD_GATEWAY);
        assert_eq!(c.response(StatusCode::BAD_GATEWAY, &get, false), Final);
    }

    #[test]
    fn transport_table() {
        let c = Classifier::default();
        use Classification::*;
        use SendState::*;
        assert_eq!(c.transport(NotSent, &Method::POST, false), Retry);
        assert_eq!(c.transport(SentNoResponse, &Method::POST, false), Final);
        assert_eq!(c.transport(SentNoResponse, &Method::POST, true), Retry);
        assert_eq!(c.transport(SentNoResponse, &Method::GET, false), Retry);
    }

    #[test]
    fn io_chain() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(send_state_from_io(&refused), SendState::NotSent);
        let wrapped = TransportError::sent_no_response(refused);
        assert_eq!(send_state_from_io(&wrapped), SendState::NotSent);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(send_state_from_io(&reset), SendState::SentNoResponse);
    }
}
