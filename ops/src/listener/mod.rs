//! Every listener under one [`Policy`]: the demo gateway's public and operators' listeners,
//! `tollgate-server`'s HTTP (and admin) and gRPC listeners.
//!
//! `axum::serve` and tonic's server set no deadline a peer must meet: a client that opens
//! connections and sends nothing, or one header byte a second, holds them until the process
//! runs out of descriptors, and then nobody is served (and `accept` fails in a hot loop). Here:
//!
//! - **Caps**: at most [`Policy::max_connections`] open at once and [`Policy::max_per_peer`]
//!   from one address. At the listener's cap the connection idle the longest (no request in
//!   flight) is closed for the new one, so idle and trickling connections never lock out a
//!   fresh caller; with none idle the new one is refused, as it is over the peer's cap:
//!   HTTP/1 gets `503` with a problem body (`too_many_connections`, `Retry-After: 1`), gRPC gets
//!   `UNAVAILABLE` "too_many_connections" on its calls, then the connection is closed.
//! - **Deadlines**: a complete request head within [`Policy::header_timeout`] of the accept
//!   and of each response (HTTP/1); the first request within it (HTTP/2, the preface
//!   included); and no more than [`Policy::idle_timeout`] with nothing in flight.
//! - **Descriptors**: on `EMFILE`/`ENFILE` the idlest connection is closed and `accept` is
//!   retried after a back-off of 5 ms doubling to 1 s, never in a hot loop.
//! - **HTTP/2**: [`Policy::max_concurrent_streams`] per connection (a client that opens more
//!   gets `REFUSED_STREAM` for those, the connection stays) and keep-alive `PING`s.
//! - **Bodies** (HTTP/1): larger than [`Policy::max_body`], `413` before they are read.
//!
//! A handler sees the peer as axum's `ConnectInfo<SocketAddr>`. Shutdown stops accepting,
//! closes idle connections, and waits up to 30 s for the requests in flight.

mod gate;
mod in_flight;
mod policy;
mod refusal;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tollgate::http::PROBLEM_JSON;
use tower::ServiceExt;

pub use policy::Policy;

use gate::{Gate, Slot};
use in_flight::Tracked;

/// What a listener speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 (the gateway, the HTTP sides, admin and metrics).
    Http1,
    /// HTTP/2 with prior knowledge, for gRPC (the rate limit service Envoy calls).
    Grpc,
}

/// The longest a shutdown waits for requests in flight.
const DRAIN: Duration = Duration::from_secs(30);
/// The longest an evicted or timed-out connection is given to finish a `GOAWAY`.
const CLOSE: Duration = Duration::from_secs(1);

/// Serves `router` on `listener` under `policy` until `shutdown` completes (then stops
/// accepting, closes idle connections and waits up to 30 s for requests in flight), or until
/// the listener fails for good. Refused at once if the policy has a zero cap or timeout.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    policy: Policy,
    protocol: Protocol,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    policy
        .check()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let router = match protocol {
        Protocol::Http1 => with_body_limit(router, policy.max_body),
        Protocol::Grpc => router,
    };
    let gate = Gate::new(policy);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = core::pin::pin!(shutdown);
    let mut backoff = Backoff::default();
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => {
                backoff.reset();
                a
            }
            Err(e) if out_of_descriptors(&e) => {
                let evicted = gate.evict_one();
                backoff.wait(&e, evicted).await;
                continue;
            }
            Err(e) if transient(&e) => continue,
            Err(e) => return Err(e),
        };
        match gate.enter(peer.ip()) {
            Ok(slot) => {
                let stop = stop_rx.clone();
                tokio::spawn(connection(
                    stream,
                    peer,
                    router.clone(),
                    slot,
                    protocol,
                    stop,
                ));
            }
            Err(full) => {
                tracing::debug!(%peer, ?full, "connection refused: over a cap");
                tokio::spawn(refusal::refuse(stream, protocol, full));
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = async {
        loop {
            let closed = gate.closed.notified();
            if gate.open() == 0 {
                return;
            }
            closed.await;
        }
    };
    if tokio::time::timeout(DRAIN, drained).await.is_err() {
        tracing::warn!(
            open = gate.open(),
            "shutdown: connections still open after 30 s"
        );
    }
    Ok(())
}

/// `accept`'s back-off while descriptors are out: 5 ms doubling to 1 s, a warning per streak.
#[derive(Default)]
struct Backoff {
    wait: Option<Duration>,
}

impl Backoff {
    fn reset(&mut self) {
        if self.wait.take().is_some() {
            tracing::info!("accepting again");
        }
    }

    async fn wait(&mut self, e: &io::Error, evicted: bool) {
        let wait = match self.wait {
            None => {
                tracing::warn!(error = %e, evicted, "out of file descriptors: closing the idlest connection and backing off");
                Duration::from_millis(5)
            }
            Some(w) => (w * 2).min(Duration::from_secs(1)),
        };
        self.wait = Some(wait);
        tokio::time::sleep(wait).await;
    }
}

fn out_of_descriptors(e: &io::Error) -> bool {
    e.raw_os_error().is_some_and(|c| {
        c == libc::EMFILE || c == libc::ENFILE || c == libc::ENOBUFS || c == libc::ENOMEM
    })
}

/// A connection that went away before it was accepted: nothing to wait for.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// Refuses a request whose declared body is over the limit before anything reads it; the
/// extractors enforce the same limit on bodies without a length.
fn with_body_limit(router: Router, max: usize) -> Router {
    router
        .layer(middleware::from_fn(
            move |req: Request, next: Next| async move {
                let declared = req
                    .headers()
                    .get(CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                if declared.is_some_and(|n| n > max as u64) {
                    return too_large(max);
                }
                next.run(req).await
            },
        ))
        .layer(DefaultBodyLimit::max(max))
}

fn too_large(max: usize) -> Response {
    let body = format!(
        "{{\"type\":\"about:blank\",\"title\":\"Content Too Large\",\"status\":413,\
         \"detail\":\"The request body is larger than {max} bytes.\",\"code\":\"body_too_large\"}}"
    );
    let mut resp = (StatusCode::PAYLOAD_TOO_LARGE, body).into_response();
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    resp
}

/// Why a connection is being closed by us.
#[derive(Debug)]
enum Close {
    Evicted,
    NoRequest,
    Idle,
    Shutdown,
}

/// Serves one connection; its slot is given back at the end.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    slot: Slot,
    protocol: Protocol,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let conn = Arc::clone(&slot.conn);
    let policy = slot.policy();
    let service = router.map_request(move |mut req: http::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        req
    });
    let service = TowerToHyperService::new(Tracked {
        inner: service,
        conn: Arc::clone(&conn),
    });
    let io = TokioIo::new(stream);
    let served = match protocol {
        Protocol::Http1 => {
            let c = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(policy.header_timeout)
                .serve_connection(io, service);
            drive(c, |c| c.graceful_shutdown(), &conn, policy, &mut stop).await
        }
        Protocol::Grpc => {
            let c = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .max_concurrent_streams(policy.max_concurrent_streams)
                .keep_alive_interval(policy.keepalive_interval)
                .keep_alive_timeout(policy.keepalive_timeout)
                .serve_connection(io, service);
            drive(c, |c| c.graceful_shutdown(), &conn, policy, &mut stop).await
        }
    };
    match served {
        Ok(Some(why)) => tracing::debug!(%peer, ?why, "connection closed"),
        Ok(None) => {}
        Err(e) => tracing::debug!(%peer, error = %e, "connection ended"),
    }
    drop(slot);
}

/// Runs a hyper connection until it ends, closing it (gracefully, then at most `CLOSE` later;
/// on shutdown at most `DRAIN`) when it is evicted, sends no request within the header
/// timeout, stays idle past the idle timeout, or the listener shuts down.
async fn drive<C, E>(
    conn: C,
    shut: impl Fn(core::pin::Pin<&mut C>),
    state: &gate::Conn,
    policy: &Policy,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<Close>, E>
where
    C: Future<Output = Result<(), E>>,
{
    let mut conn = core::pin::pin!(conn);
    let why = loop {
        let check = tokio::time::sleep(next_check(state, policy));
        tokio::select! {
            r = conn.as_mut() => return r.map(|()| None),
            () = state.evict.notified() => break Close::Evicted,
            _ = stop.wait_for(|s| *s) => break Close::Shutdown,
            () = check => {
                if let Some(why) = expired(state, policy) {
                    break why;
                }
            }
        }
    };
    // Nothing was ever asked on it: nothing to finish, close at once.
    if !state.served() {
        return Ok(Some(why));
    }
    shut(conn.as_mut());
    let bound = if matches!(why, Close::Shutdown) {
        DRAIN
    } else {
        CLOSE
    };
    match tokio::time::timeout(bound, conn).await {
        Ok(r) => r.map(|()| Some(why)),
        Err(_) => Ok(Some(why)),
    }
}

/// When to look again whether the connection's deadlines passed.
fn next_check(state: &gate::Conn, policy: &Policy) -> Duration {
    let limit = if state.served() {
        policy.idle_timeout
    } else {
        policy.header_timeout
    };
    match state.idle_for() {
        Some(idle) => limit.saturating_sub(idle).max(Duration::from_millis(10)),
        None => limit,
    }
}

fn expired(state: &gate::Conn, policy: &Policy) -> Option<Close> {
    let idle = state.idle_for()?;
    if !state.served() && idle >= policy.header_timeout {
        Some(Close::NoRequest)
    } else if state.served() && idle >= policy.idle_timeout {
        Some(Close::Idle)
    } else {
        None
    }
}
