//! A refusal as gRPC says it: a gRPC client reads a status from the `grpc-status` header, not
//! an HTTP status or a JSON body, so a gRPC request is refused with a trailers-only response.
//!
//! What is sent (the gRPC over HTTP/2 spec, `PROTOCOL-HTTP2.md`, and gRPC proposal A6 for the
//! pushback):
//! - HTTP status 200 and `content-type: application/grpc`: a gRPC client reads any other HTTP
//!   status as a transport failure, and the spec's HTTP-to-gRPC mapping makes both 429 and 503
//!   `UNAVAILABLE`, losing the difference between the caller's quota and the service's capacity;
//! - `grpc-status`: `RESOURCE_EXHAUSTED` (8) where HTTP would say 429, `UNAVAILABLE` (14) where
//!   it would say 503;
//! - `grpc-message`: the problem body's `detail`, percent-encoded as the spec asks;
//! - `grpc-retry-pushback-ms`: the wait in milliseconds (rounded up, capped at
//!   `retry_after.max` like `Retry-After`), where there is one; `-1` ("do not retry", per A6)
//!   for a request whose cost no wait can cover ([`Decision::Exceeds`]);
//! - no body: headers only, ending the stream ("Trailers-Only").

use core::time::Duration;

use ::http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};

use crate::decision::Decision;

/// `grpc-status`: the call's status code.
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message`: the status message, percent-encoded.
pub const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// `grpc-retry-pushback-ms` (gRPC proposal A6): how long the client should wait before a retry;
/// negative for "do not retry".
pub const GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// gRPC's `RESOURCE_EXHAUSTED`: the caller's own quota (HTTP 429).
pub const GRPC_RESOURCE_EXHAUSTED: u32 = 8;
/// gRPC's `UNAVAILABLE`: shared capacity or the limiter's store (HTTP 503).
pub const GRPC_UNAVAILABLE: u32 = 14;

/// True when `headers` say the request is gRPC: `content-type` is `application/grpc`, or
/// `application/grpc+<codec>` (`+proto`, `+json`, ...), with or without parameters. gRPC-Web
/// (`application/grpc-web...`) is not: its status travels in the body, so it gets the HTTP
/// refusal (put the limit inside the gRPC-Web translation to have it answered as gRPC).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return false;
    };
    let bytes = value.as_bytes();
    const GRPC: &[u8] = b"application/grpc";
    bytes.len() >= GRPC.len()
        && bytes[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(bytes.get(GRPC.len()), None | Some(b'+' | b';' | b' '))
}

/// The gRPC status code for a refusal; `None` for [`Decision::Admit`].
pub fn grpc_status(decision: &Decision) -> Option<u32> {
    match decision.http_status() {
        429 => Some(GRPC_RESOURCE_EXHAUSTED),
        503 => Some(GRPC_UNAVAILABLE),
        _ => None,
    }
}

/// `grpc-retry-pushback-ms` for `decision`: the wait in whole milliseconds rounded up (at least
/// 1) and capped at `max`; `-1` where no wait helps; `None` where no wait is known.
pub fn retry_pushback_ms(decision: &Decision, max: Duration) -> Option<i64> {
    if let Decision::Exceeds { .. } = decision {
        return Some(-1);
    }
    let wait = decision.retry_after()?.min(max);
    let ms = wait.as_nanos().div_ceil(1_000_000).max(1);
    Some(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// `text` percent-encoded as `grpc-message` requires: every byte outside printable ASCII
/// (`0x20..=0x7E`), and `%` itself, becomes `%XX`.
pub fn percent_encode_message(text: &str) -> HeaderValue {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if (0x20..=0x7E).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b & 0xF)]));
        }
    }
    HeaderValue::from_str(&out).expect("printable ASCII is a valid header value")
}

/// Writes the gRPC status headers of a refusal of `decision` (see the module docs) into
/// `headers`, with `message` as `grpc-message`. Nothing is written for an admit.
pub(crate) fn write_grpc_status(
    headers: &mut HeaderMap,
    decision: &Decision,
    message: &str,
    max: Duration,
) {
    let Some(status) = grpc_status(decision) else {
        return;
    };
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from(status));
    headers.insert(GRPC_MESSAGE, percent_encode_message(message));
    if let Some(ms) = retry_pushback_ms(decision, max) {
        headers.insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from(ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{BucketKind, Cause};

    fn headers(ct: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
        h
    }

    #[test]
    fn grpc_content_types_are_recognized_and_others_are_not() {
        for ct in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc+json",
            "Application/GRPC",
            "application/grpc; charset=utf-8",
        ] {
            assert!(is_grpc(&headers(ct)), "{ct}");
        }
        for ct in [
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/grpcx",
            "application/json",
            "application/gr",
            "",
        ] {
            assert!(!is_grpc(&headers(ct)), "{ct}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn statuses_follow_the_http_status() {
        let throttle = Decision::Throttle {
            retry_after: Duration::from_micros(1500),
            bucket: BucketKind::Burst,
        };
        let exceeds = Decision::Exceeds {
            bucket: BucketKind::Sustained,
        };
        let full = Decision::Unavailable {
            retry_after: Some(Duration::from_secs(5000)),
            cause: Cause::ShardFull,
        };
        let store = Decision::Unavailable {
            retry_after: None,
            cause: Cause::StoreUnavailable,
        };
        assert_eq!(grpc_status(&Decision::Admit), None);
        assert_eq!(grpc_status(&throttle), Some(8));
        assert_eq!(grpc_status(&exceeds), Some(8));
        assert_eq!(grpc_status(&full), Some(14));
        assert_eq!(grpc_status(&store), Some(14));
        let max = Duration::from_secs(3600);
        assert_eq!(retry_pushback_ms(&throttle, max), Some(2), "rounded up");
        assert_eq!(retry_pushback_ms(&exceeds, max), Some(-1), "do not retry");
        assert_eq!(retry_pushback_ms(&full, max), Some(3_600_000), "capped");
        assert_eq!(retry_pushback_ms(&store, max), None);
        let zero = Decision::Throttle {
            retry_after: Duration::ZERO,
            bucket: BucketKind::Burst,
        };
        assert_eq!(retry_pushback_ms(&zero, max), Some(1), "at least 1");
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(
            percent_encode_message("retry after 1 second."),
            "retry after 1 second."
        );
        assert_eq!(percent_encode_message("50% used"), "50%25 used");
        assert_eq!(percent_encode_message("a\nb"), "a%0Ab");
        assert_eq!(percent_encode_message("é"), "%C3%A9");
    }
}
