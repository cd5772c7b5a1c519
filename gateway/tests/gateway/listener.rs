//! The gateway's router behind its listener (`tollgate_ops::listener`) under a bounded
//! slowloris on loopback (at most 80 connections, each test under 5 s): a full listener makes
//! room for a fresh caller by closing the idlest connection, one peer is held to its cap with a
//! clear refusal, half-sent and idle connections are closed at the header deadline, and large
//! bodies are refused before they are read.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tollgate::{Limiter, Profile};

use tollgate_ops::{Policy, Protocol};

use tollgate_gateway::app;

const HEADER_TIMEOUT: Duration = Duration::from_millis(300);

const PROFILE: &str = r#"
name: limits-test
identities: { capacity: 1024 }
route_classes:
  read:
    burst:     { tokens: 1000, per: 1s }
    sustained: { tokens: 100000, per: 1h }
routes:
  - { method: "*", path: "/v1/**", class: read }
"#;

async fn start(limits: Policy) -> SocketAddr {
    let limiter = Arc::new(
        Limiter::builder(Profile::from_yaml(PROFILE).unwrap())
            .build()
            .unwrap(),
    );
    let router = app::router(limiter, app::Tokens::default(), Vec::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tollgate_ops::serve(
        listener,
        router,
        limits,
        Protocol::Http1,
        std::future::pending(),
    );
    tokio::spawn(served);
    addr
}

fn limits(max_connections: usize, max_per_peer: usize) -> Policy {
    Policy {
        max_connections,
        max_per_peer,
        header_timeout: HEADER_TIMEOUT,
        max_body: 1024,
        ..Policy::default()
    }
}

/// A connection from `source` (any 127.0.0.0/8 address is loopback on Linux).
async fn connect_from(source: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// A request head cut short: the server waits for the rest.
async fn half_sent(source: &str, addr: SocketAddr) -> TcpStream {
    let mut s = connect_from(source, addr).await;
    s.write_all(b"GET /v1/items HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .await
        .unwrap();
    s
}

/// Everything the server sends until it closes (bounded by `within`).
async fn read_to_close(s: &mut TcpStream, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    match tokio::time::timeout(within, s.read_to_end(&mut out)).await {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

/// One complete request on a fresh connection from `source`; the status line's code.
async fn get(source: &str, addr: SocketAddr) -> u16 {
    let mut s = connect_from(source, addr).await;
    s.write_all(b"GET /v1/items HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let text = read_to_close(&mut s, Duration::from_secs(2))
        .await
        .expect("an answer within 2 s");
    text.get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"))
}

#[tokio::test]
async fn a_full_listener_of_half_sent_heads_still_serves_a_fresh_caller() {
    let addr = start(limits(64, 64)).await;
    let mut held = Vec::new();
    for _ in 0..64 {
        held.push(half_sent("127.0.0.1", addr).await);
    }
    // At the cap, the idlest half-sent connection makes room: served at once, not refused.
    let started = Instant::now();
    assert_eq!(get("127.0.0.3", addr).await, 200);
    assert!(
        started.elapsed() < HEADER_TIMEOUT,
        "not made to wait for the deadline"
    );
    // At the header deadline the server closes every half-sent connection...
    for s in &mut held {
        let rest = read_to_close(s, HEADER_TIMEOUT * 5)
            .await
            .expect("closed by the server after the header timeout");
        assert!(!rest.contains("200 OK"), "{rest}");
    }
    // ...and the gateway serves again.
    assert_eq!(get("127.0.0.1", addr).await, 200);
}

#[tokio::test]
async fn one_peer_cannot_take_the_connections_others_need() {
    let addr = start(limits(64, 8)).await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(half_sent("127.0.0.1", addr).await);
    }
    let mut ninth = connect_from("127.0.0.1", addr).await;
    let refusal = read_to_close(&mut ninth, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(refusal.starts_with("HTTP/1.1 503 "), "{refusal}");
    assert!(refusal.contains("retry-after: 1\r\n"), "{refusal}");
    assert!(
        refusal.contains("\"code\":\"too_many_connections\""),
        "{refusal}"
    );
    // Another address is served while the first one holds its whole share.
    for _ in 0..5 {
        assert_eq!(get("127.0.0.2", addr).await, 200);
    }
    drop(held);
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let addr = start(limits(64, 64)).await;
    let mut s = connect_from("127.0.0.1", addr).await;
    s.write_all(b"GET /v1/items HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    s.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    // Then nothing: the server closes the connection after the header timeout.
    let started = Instant::now();
    read_to_close(&mut s, HEADER_TIMEOUT * 5)
        .await
        .expect("the idle connection is closed");
    assert!(started.elapsed() >= HEADER_TIMEOUT / 2);
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_before_it_is_read() {
    let addr = start(limits(64, 64)).await;
    let mut s = connect_from("127.0.0.1", addr).await;
    // Declares 10 MB and sends none of it: the answer must not wait for the body.
    s.write_all(
        b"POST /v1/items HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          content-length: 10000000\r\nconnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let text = read_to_close(&mut s, Duration::from_secs(2))
        .await
        .expect("answered without reading the body");
    assert!(text.starts_with("HTTP/1.1 413 "), "{text}");
    assert!(text.contains("\"code\":\"body_too_large\""), "{text}");
}

#[test]
fn the_connection_cap_fits_under_the_open_file_limit() {
    let wanted = Policy {
        max_connections: usize::MAX,
        ..Policy::default()
    };
    let capped = wanted.within_file_limit();
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes only the struct we pass, which is ours.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    if lim.rlim_cur != libc::RLIM_INFINITY {
        assert!((capped.max_connections as u64) < lim.rlim_cur);
    }
    assert!(capped.max_connections >= 1);
}

/// The operators' listener (metrics, admin) under 70 slow connections, from one address and
/// from 70: a scraper from another address is still served at once.
#[tokio::test]
async fn a_scraper_is_served_while_slow_connections_are_held_on_the_operators_listener() {
    let addr = start(Policy {
        header_timeout: Duration::from_secs(30),
        ..Policy::operator()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..70 {
        held.push(half_sent("127.0.0.2", addr).await);
    }
    assert_eq!(get("127.0.0.1", addr).await, 200);
    for i in 0..70 {
        held.push(half_sent(&format!("127.0.1.{i}"), addr).await);
    }
    for _ in 0..3 {
        assert_eq!(get("127.0.0.1", addr).await, 200);
    }
}
