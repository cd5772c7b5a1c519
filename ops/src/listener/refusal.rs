//! What a connection over a cap gets before it is closed: a clear answer, bounded in time and
//! in number (a flood of refusals must not hold more descriptors than it is refused for).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tollgate::http::PROBLEM_JSON;

use super::gate::Full;
use super::Protocol;

/// Refusals answered at once; past them a connection is closed without an answer.
const MAX_REFUSING: usize = 64;
/// The longest a refusal may take (a peer that does not read cannot hold it).
const REFUSAL_TIME: Duration = Duration::from_secs(1);

static REFUSING: AtomicUsize = AtomicUsize::new(0);

fn body(full: Full) -> String {
    let detail = match full {
        Full::Listener => "Too many open connections; retry later.",
        Full::Peer => "Too many open connections from your address; retry later.",
    };
    format!(
        "{{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,\
         \"detail\":\"{detail}\",\"code\":\"too_many_connections\",\"retry_after\":1}}"
    )
}

/// The HTTP/1.1 answer: `503` with a problem body, `Retry-After: 1`, `Connection: close`.
pub(super) fn http1(full: Full) -> String {
    let body = body(full);
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {PROBLEM_JSON}\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Answers `stream` with the refusal of its protocol (HTTP/2: every call on it gets gRPC
/// `UNAVAILABLE` "too_many_connections"), then closes it.
pub(super) async fn refuse(mut stream: TcpStream, protocol: Protocol, full: Full) {
    // Relaxed: a count of refusals in flight, which decides only whether to answer.
    if REFUSING.fetch_add(1, Ordering::Relaxed) >= MAX_REFUSING {
        REFUSING.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let answer = async {
        match protocol {
            Protocol::Http1 => {
                let _ = stream.write_all(http1(full).as_bytes()).await;
                let _ = stream.shutdown().await;
            }
            Protocol::Grpc => {
                let svc = hyper::service::service_fn(|_: Request<Incoming>| async {
                    let mut r = Response::new(String::new());
                    *r.status_mut() = StatusCode::OK;
                    let h = r.headers_mut();
                    h.insert("content-type", HeaderValue::from_static("application/grpc"));
                    h.insert("grpc-status", HeaderValue::from_static("14"));
                    h.insert(
                        "grpc-message",
                        HeaderValue::from_static("too_many_connections"),
                    );
                    Ok::<_, std::convert::Infallible>(r)
                });
                let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .timer(TokioTimer::new())
                    .max_concurrent_streams(1)
                    .serve_connection(TokioIo::new(stream), svc);
                let _ = conn.await;
            }
        }
    };
    let _ = tokio::time::timeout(REFUSAL_TIME, answer).await;
    REFUSING.fetch_sub(1, Ordering::Relaxed);
}
