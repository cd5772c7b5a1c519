//! The gateway's accept loop, hardened against connection exhaustion (shared by `main.rs` and
//! the tests, which include this file with `#[path]`).
//!
//! `axum::serve` sets no timer, so hyper's header-read timeout never runs: a client that opens
//! connections and sends half a request head, or nothing after its first request, holds them
//! until the process runs out of file descriptors, and then nobody is served. Here:
//!
//! - every connection must send a complete request head within [`Limits::header_timeout`] of
//!   being accepted, and again within it of each response (hyper starts the same timer when a
//!   keep-alive connection goes idle), or it is closed;
//! - at most [`Limits::max_connections`] connections are open at once, and at most
//!   [`Limits::max_per_peer`] from one address (trusted proxies excepted: many callers share
//!   their address); a connection over either cap gets a `503` problem body with
//!   `Retry-After: 1` and is closed at once, so that the refusal is clear and costs nothing;
//! - a request body larger than [`Limits::max_body`] is refused with `413` before it is read.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{ConnectInfo, DefaultBodyLimit, Request};
use axum::http::header::CONTENT_LENGTH;
use axum::http::{Request as HttpRequest, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tollgate::http::Cidr;
use tollgate::http::PROBLEM_JSON;
use tower::ServiceExt;

/// How much of the gateway one client, or all of them, may hold.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Open connections at once, all peers together.
    pub max_connections: usize,
    /// Open connections at once from one peer address (trusted proxies are not counted).
    pub max_per_peer: usize,
    /// Time to send a complete request head, from the accept or from the previous response.
    pub header_timeout: Duration,
    /// The largest request body, in bytes.
    pub max_body: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 4096,
            max_per_peer: 256,
            header_timeout: Duration::from_secs(10),
            max_body: 64 * 1024,
        }
    }
}

impl Limits {
    /// These limits with `max_connections` lowered to what the process's open-file limit
    /// allows (less a reserve for the profile file, logs and the listener), so that the cap,
    /// not `EMFILE`, is what refuses the next connection.
    pub fn within_file_limit(mut self) -> Self {
        if let Some(files) = open_file_limit() {
            let usable = files.saturating_sub(64).max(1) as usize;
            self.max_connections = self.max_connections.min(usable);
        }
        self
    }
}

#[cfg(unix)]
fn open_file_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` only writes the struct we pass, which is valid and exclusively ours.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (r == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

#[cfg(not(unix))]
fn open_file_limit() -> Option<u64> {
    None
}

/// Open connections, in all and per peer address.
struct Open {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
}

/// Counts connections in and out; a [`Slot`] gives its place back when dropped.
struct Gate {
    limits: Limits,
    trusted: Vec<Cidr>,
    open: Mutex<Open>,
}

/// One admitted connection's place under the caps.
struct Slot {
    gate: Arc<Gate>,
    peer: Option<IpAddr>,
}

impl Gate {
    /// A place for a connection from `peer`, or `None` when a cap is reached.
    fn enter(self: &Arc<Gate>, peer: IpAddr) -> Option<Slot> {
        let counted = !self.trusted.iter().any(|c| c.contains(peer));
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.total >= self.limits.max_connections {
            return None;
        }
        if counted {
            let n = open.per_peer.entry(peer).or_insert(0);
            if *n >= self.limits.max_per_peer {
                return None;
            }
            *n += 1;
        }
        open.total += 1;
        Some(Slot {
            gate: Arc::clone(self),
            peer: counted.then_some(peer),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total -= 1;
        if let Some(peer) = self.peer {
            if let Some(n) = open.per_peer.get_mut(&peer) {
                *n -= 1;
                if *n == 0 {
                    open.per_peer.remove(&peer);
                }
            }
        }
    }
}

/// What a connection over a cap reads before it is closed.
const REFUSAL_BODY: &str = "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\
\"status\":503,\"detail\":\"Too many open connections; retry later.\",\
\"code\":\"too_many_connections\",\"retry_after\":1}";

fn refusal() -> String {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {PROBLEM_JSON}\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{REFUSAL_BODY}",
        REFUSAL_BODY.len()
    )
}

/// Refuses a request whose declared body is over the limit before anything reads it (the
/// handlers' extractors enforce the same limit on bodies without a length).
async fn refuse_large_bodies(max: usize, req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        let body = format!(
            "{{\"type\":\"about:blank\",\"title\":\"Content Too Large\",\"status\":413,\
             \"detail\":\"The request body is larger than {max} bytes.\",\"code\":\"body_too_large\"}}"
        );
        let mut resp = (StatusCode::PAYLOAD_TOO_LARGE, body).into_response();
        resp.headers_mut().insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static(PROBLEM_JSON),
        );
        return resp;
    }
    next.run(req).await
}

/// Serves `router` on `listener` until the listener fails for good. `trusted` are the proxy
/// networks exempt from the per-peer cap.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    trusted: Vec<Cidr>,
) -> io::Result<()> {
    let max_body = limits.max_body;
    let router = router
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            refuse_large_bodies(max_body, req, next)
        }))
        .layer(DefaultBodyLimit::max(max_body));
    let gate = Arc::new(Gate {
        limits,
        trusted,
        open: Mutex::new(Open {
            total: 0,
            per_peer: HashMap::new(),
        }),
    });
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) if is_transient(&e) => {
                // Out of descriptors or a connection reset before accept: wait, go on.
                tracing::warn!(error = %e, "accept failed; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        match gate.enter(peer.ip()) {
            Some(slot) => {
                tokio::spawn(connection(stream, peer, router.clone(), slot));
            }
            None => {
                tokio::spawn(refuse(stream));
            }
        }
    }
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || e
        .raw_os_error()
        .is_some_and(|c| c == libc::EMFILE || c == libc::ENFILE)
}

/// Writes the refusal (bounded in time: a peer that does not read cannot hold the task).
async fn refuse(mut stream: TcpStream) {
    let write = async {
        stream.write_all(refusal().as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}

/// Serves one connection, HTTP/1.1 with the header deadline; its slot is freed at the end.
async fn connection(stream: TcpStream, peer: SocketAddr, router: Router, slot: Slot) {
    let _ = stream.set_nodelay(true);
    let service = router.map_request(move |mut req: HttpRequest<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        req
    });
    let service = TowerToHyperService::new(service);
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(slot.gate.limits.header_timeout)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "connection closed");
    }
    drop(slot);
}
