//! HTTP/1 listeners under a flood of idle and trickling connections on loopback: they are cut
//! at the header deadline, one address cannot take the listener, and a fresh caller is served
//! while the listener is full (the idlest connection makes room). Floods come from other
//! loopback addresses (127.0.0.2 and up) than the fresh caller (127.0.0.1).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tollgate_ops::{serve, Policy, Protocol};

async fn listening(policy: Policy) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Router::new().route("/", get(|| async { "ok" }));
    tokio::spawn(serve(
        listener,
        router,
        policy,
        Protocol::Http1,
        std::future::pending(),
    ));
    addr
}

/// A connection from `from` (any 127.0.0.0/8 address).
async fn connect(addr: SocketAddr, from: [u8; 4]) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::new(IpAddr::from(from), 0)).unwrap();
    s.connect(addr).await.unwrap()
}

/// `GET /` on a new connection from 127.0.0.1: the status line and body.
async fn fresh_get(addr: SocketAddr) -> String {
    let mut s = connect(addr, [127, 0, 0, 1]).await;
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
        .await
        .expect("answered within 5 s")
        .unwrap();
    out
}

/// Whether the server closed `s` (EOF, or a reset), reading whatever it sent first.
async fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_millis(50), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

fn policy() -> Policy {
    Policy {
        header_timeout: Duration::from_millis(600),
        ..Policy::default()
    }
}

#[tokio::test]
async fn silent_and_trickling_connections_are_closed_at_the_header_deadline() {
    let addr = listening(policy()).await;
    let mut silent = Vec::new();
    let mut trickling = Vec::new();
    for i in 0..20u8 {
        silent.push(connect(addr, [127, 0, 1, i]).await);
        let mut t = connect(addr, [127, 0, 2, i]).await;
        t.write_all(b"GET / HTTP/1.1\r\nhost").await.unwrap();
        trickling.push(t);
    }
    let start = Instant::now();
    // One more header byte every 100 ms: never a complete head.
    while start.elapsed() < Duration::from_millis(1500) {
        for t in &mut trickling {
            let _ = t.write_all(b"x").await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (i, s) in silent.iter_mut().chain(trickling.iter_mut()).enumerate() {
        assert!(closed(s).await, "connection {i} still open after 1.5 s");
    }
    assert!(fresh_get(addr).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn one_address_cannot_take_the_listener() {
    let addr = listening(Policy {
        max_per_peer: 8,
        ..policy()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(connect(addr, [127, 0, 0, 2]).await);
    }
    let mut over = connect(addr, [127, 0, 0, 2]).await;
    let mut answer = String::new();
    over.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too_many_connections") && answer.contains("retry-after: 1"));
    assert!(fresh_get(addr).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn a_fresh_caller_is_served_while_idle_connections_fill_the_listener() {
    let addr = listening(Policy {
        max_connections: 32,
        header_timeout: Duration::from_secs(30),
        ..Policy::default()
    })
    .await;
    let mut flood = Vec::new();
    for i in 0..70u8 {
        flood.push(connect(addr, [127, 0, 3, i]).await);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..5 {
        let answer = fresh_get(addr).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    // The flood made room for each newer one: at most 32 of it are still open.
    let mut open = 0;
    for s in &mut flood {
        if !closed(s).await {
            open += 1;
        }
    }
    assert!(open <= 32, "{open} of the flood still open");
}

#[tokio::test]
async fn a_busy_listener_refuses_clearly() {
    // Two connections, each with a request in flight (a handler that waits): the third finds
    // nobody idle to close and is refused.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Router::new().route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            "late"
        }),
    );
    let p = Policy {
        max_connections: 2,
        ..Policy::default()
    };
    tokio::spawn(serve(
        listener,
        router,
        p,
        Protocol::Http1,
        std::future::pending(),
    ));
    let mut busy = Vec::new();
    for i in 0..2u8 {
        let mut s = connect(addr, [127, 0, 4, i]).await;
        s.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        busy.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = fresh_get(addr).await;
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("too_many_connections"),
        "{answer}"
    );
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_before_it_is_read() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Router::new().route("/", axum::routing::post(|b: String| async move { b }));
    let p = Policy {
        max_body: 16,
        ..Policy::default()
    };
    tokio::spawn(serve(
        listener,
        router,
        p,
        Protocol::Http1,
        std::future::pending(),
    ));
    let mut s = connect(addr, [127, 0, 0, 1]).await;
    s.write_all(
        b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 1000000000000\r\nconnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(
        out.starts_with("HTTP/1.1 413") && out.contains("body_too_large"),
        "{out}"
    );
}

#[tokio::test]
async fn a_policy_with_a_zero_cap_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let p = Policy {
        max_per_peer: 0,
        ..Policy::default()
    };
    let e = serve(
        listener,
        Router::new(),
        p,
        Protocol::Http1,
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("max_per_peer"), "{e}");
}

#[tokio::test]
async fn shutdown_finishes_the_request_in_flight() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Router::new().route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            "done"
        }),
    );
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        router,
        Policy::default(),
        Protocol::Http1,
        async {
            let _ = rx.await;
        },
    ));
    let mut s = connect(addr, [127, 0, 0, 1]).await;
    s.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    tx.send(()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(
        out.starts_with("HTTP/1.1 200") && out.ends_with("done"),
        "{out}"
    );
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
}
