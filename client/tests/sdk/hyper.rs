//! `RetryLayer` around hyper-util's legacy client, against a tiny HTTP/1.1 server on localhost.
//! Real sockets, real (millisecond) sleeps on tokio's clock.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, StatusCode};
use hyper_util::client::legacy::{Client, Error as HyperError};
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tollgate_client::{
    Backoff, ClientStats, GiveUp, Last, RetryBudget, RetryLayer, RetryPolicy, SendState,
    IDEMPOTENCY_KEY,
};
use tower::{Layer, Service};

/// Answers one connection per canned response, in order, and records each request head.
async fn serve(responses: &[&'static str]) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heads);
    let responses = responses.to_vec();
    tokio::spawn(async move {
        for response in responses {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            // Read the head, then the body by Content-Length.
            let head_end = loop {
                let n = sock.read(&mut chunk).await.unwrap();
                assert!(n > 0, "client closed early");
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while buf.len() < head_end + len {
                let n = sock.read(&mut chunk).await.unwrap();
                buf.extend_from_slice(&chunk[..n]);
            }
            seen.lock().unwrap().push(head);
            sock.write_all(response.as_bytes()).await.unwrap();
            sock.shutdown().await.unwrap();
        }
    });
    (addr, heads)
}

fn layer(stats: &Arc<ClientStats>) -> RetryLayer<impl Fn(&HyperError) -> SendState + Clone> {
    let policy = RetryPolicy::new()
        .max_attempts(3)
        .deadline(Some(Duration::from_secs(10)))
        .backoff(Backoff::new(
            Duration::from_millis(1),
            Duration::from_millis(5),
        ))
        .retry_after_jitter(0.0, Duration::from_millis(2))
        .stats(Arc::clone(stats));
    RetryLayer::new(policy, RetryBudget::default())
        .generate_idempotency_keys(true)
        .send_state(|e: &HyperError| {
            if e.is_connect() {
                SendState::NotSent
            } else {
                SendState::SentNoResponse
            }
        })
}

fn post(addr: SocketAddr) -> Request<String> {
    Request::builder()
        .method(Method::POST)
        .uri(format!("http://{addr}/orders"))
        .body("{\"item\":1}".to_owned())
        .unwrap()
}

#[tokio::test]
async fn post_with_generated_key_is_retried_after_503() {
    let (addr, heads) = serve(&[
        "HTTP/1.1 503 Service Unavailable\r\nretry-after: 0\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        "HTTP/1.1 201 Created\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
    ])
    .await;
    let stats = Arc::new(ClientStats::new());
    let client = Client::builder(TokioExecutor::new()).build_http::<String>();
    let mut svc = layer(&stats).layer(client);
    std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
    let resp = svc.call(post(addr)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);

    let heads = heads.lock().unwrap();
    assert_eq!(heads.len(), 2);
    let key = |h: &str| {
        h.lines()
            .find_map(|l| l.strip_prefix(&format!("{}:", IDEMPOTENCY_KEY)))
            .map(|v| v.trim().to_owned())
    };
    assert!(key(&heads[0]).is_some());
    assert_eq!(key(&heads[0]), key(&heads[1]));
    let st = stats.snapshot();
    assert_eq!((st.attempts, st.successes, st.retry_after_seen), (2, 1, 1));
}

#[tokio::test]
async fn connection_refused_is_retried_even_for_post() {
    // A port that was just free: nothing listens there.
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let stats = Arc::new(ClientStats::new());
    let client = Client::builder(TokioExecutor::new()).build_http::<String>();
    let mut svc = layer(&stats).generate_idempotency_keys(false).layer(client);
    let err = svc.call(post(addr)).await.unwrap_err();
    assert_eq!((err.reason, err.attempts), (GiveUp::Attempts, 3));
    assert!(matches!(&err.last, Some(Last::Transport(t)) if t.state == SendState::NotSent));
}
