//! gRPC refusals over a real tonic server and channel on loopback: the layer around tonic's
//! `Server::builder()`, a unary method served through tonic's own `server::Grpc` (a hand-written
//! codec of raw bytes, so no protoc), and tonic's client reading the status.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut};
use http::uri::PathAndQuery;
use tokio::net::TcpListener;
use tollgate::http::PeerExtractor;
use tollgate::tower::RateLimitLayer;
use tollgate::{Limiter, Profile};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::{NamedService, UnaryService};
use tonic::transport::server::{TcpConnectInfo, TcpIncoming};
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};

/// `Say` is limited to one call per second per caller; `Busy` shares one admission slot per
/// second among everyone (the second call is a 503, `UNAVAILABLE`).
const PROFILE: &str = r#"
name: grpc-test
identities: { capacity: 64 }
route_classes:
  say:
    burst:     { tokens: 1, per: 1s }
    sustained: { tokens: 100, per: 1h }
  busy:
    burst:     { tokens: 100, per: 1s }
    sustained: { tokens: 1000, per: 1h }
shared_capacity:
  shards: 1
  window: 1s
  slots_per_window: 1
  tenant_share: 1.0
routes:
  - { method: POST, path: "/tollgate.test.Echo/Say",  class: say }
  - { method: POST, path: "/tollgate.test.Echo/Busy", class: busy }
"#;

/// Messages are raw bytes: encoded and decoded as they are.
#[derive(Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

/// The unary method: answers the request's bytes back.
struct Reply;

impl UnaryService<Vec<u8>> for Reply {
    type Response = Vec<u8>;
    type Future = std::future::Ready<Result<tonic::Response<Vec<u8>>, Status>>;
    fn call(&mut self, request: tonic::Request<Vec<u8>>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(request.into_inner())))
    }
}

/// The gRPC service `tollgate.test.Echo` with two unary methods that echo.
#[derive(Clone)]
struct Echo;

impl NamedService for Echo {
    const NAME: &'static str = "tollgate.test.Echo";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl tower::Service<http::Request<tonic::body::Body>> for Echo {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move { Ok(tonic::server::Grpc::new(Raw).unary(Reply, request).await) })
    }
}

/// Starts the tonic server with the layer on a free loopback port; returns its address and
/// the task serving it (aborted by the caller).
async fn start() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let limiter = Arc::new(
        Limiter::builder(Profile::from_yaml(PROFILE).unwrap())
            .build()
            .unwrap(),
    );
    let layer = RateLimitLayer::with_extractor(
        limiter,
        PeerExtractor::new().peer_addr_from(|e| e.get::<TcpConnectInfo>()?.remote_addr()),
    )
    .refusal_body(|b: Vec<u8>| {
        tonic::body::Body::new(http_body_util::Full::new(bytes::Bytes::from(b)))
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder()
        .layer(layer)
        .add_service(Echo)
        .serve_with_incoming(TcpIncoming::from(listener));
    let task = tokio::spawn(async move { server.await.unwrap() });
    (addr, task)
}

async fn call(channel: &Channel, method: &'static str) -> Result<Vec<u8>, Status> {
    let mut client = tonic::client::Grpc::new(channel.clone());
    client
        .ready()
        .await
        .map_err(|e| Status::unknown(e.to_string()))?;
    client
        .unary(
            tonic::Request::new(b"hello".to_vec()),
            PathAndQuery::from_static(method),
            Raw,
        )
        .await
        .map(tonic::Response::into_inner)
}

fn pushback_ms(status: &Status) -> Option<i64> {
    status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .map(|v| v.to_str().unwrap().parse().unwrap())
}

#[tokio::test]
async fn a_throttled_grpc_call_is_resource_exhausted_with_a_pushback() {
    let (addr, server) = start().await;
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();

    assert_eq!(
        call(&channel, "/tollgate.test.Echo/Say").await.unwrap(),
        b"hello"
    );
    // The next call within the second is over the burst (a few tries, in case a loaded machine
    // let a whole second pass between two calls).
    let mut refused = None;
    for _ in 0..5 {
        if let Err(status) = call(&channel, "/tollgate.test.Echo/Say").await {
            refused = Some(status);
            break;
        }
    }
    let refused = refused.expect("calls in a row are over one call a second");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(
        refused.message(),
        "You have used your burst quota for this route; retry after 1 second."
    );
    let ms = pushback_ms(&refused).expect("a throttle has a wait");
    assert!((1..=1000).contains(&ms), "at most the burst's 1 s: {ms}");
    // The rate-limit headers travel as metadata (the empty body is checked below, on the layer
    // alone).
    assert!(refused.metadata().get("ratelimit-policy").is_some());
    assert!(refused.metadata().get("x-request-id").is_some());

    // After the pushback the same call is admitted again.
    tokio::time::sleep(Duration::from_millis(ms as u64 + 20)).await;
    assert_eq!(
        call(&channel, "/tollgate.test.Echo/Say").await.unwrap(),
        b"hello"
    );
    server.abort();
}

#[tokio::test]
async fn a_grpc_call_over_shared_capacity_is_unavailable_with_a_pushback() {
    let (addr, server) = start().await;
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    // The window's one slot: whichever call lands first in a window takes it, so of three
    // calls in a row (two of them in one window, even if a window ends among them) one is
    // refused.
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        outcomes.push(call(&channel, "/tollgate.test.Echo/Busy").await);
    }
    let refused = outcomes
        .into_iter()
        .find_map(Result::err)
        .expect("three calls, one slot per second: one is refused");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(
        refused.message(),
        "The service is at capacity; retry after 1 second."
    );
    let ms = pushback_ms(&refused).expect("the next window is known");
    assert!((1..=1000).contains(&ms), "at most one window: {ms}");
    server.abort();
}

#[tokio::test]
async fn a_plain_http_request_to_the_same_layer_gets_the_problem_body() {
    // The content type decides, request by request: checked on the layer alone (tonic's server
    // speaks HTTP/2 only).
    use tower::{Layer, ServiceExt};
    let limiter = Arc::new(
        Limiter::builder(Profile::from_yaml(PROFILE).unwrap())
            .build()
            .unwrap(),
    );
    let layer = RateLimitLayer::new(limiter);
    let inner = tower::service_fn(|_: http::Request<Vec<u8>>| async {
        Ok::<_, Infallible>(http::Response::new(Vec::new()))
    });
    let svc = layer.layer(inner);
    let request = |ct: &str| {
        let mut r = http::Request::post("/tollgate.test.Echo/Say")
            .header("content-type", ct)
            .body(Vec::new())
            .unwrap();
        r.extensions_mut()
            .insert(SocketAddr::from(([192, 0, 2, 1], 5000)));
        r
    };
    let first = svc
        .clone()
        .oneshot(request("application/grpc"))
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    assert!(
        first.headers().get("grpc-status").is_none(),
        "admitted: the handler's answer"
    );

    let grpc = svc
        .clone()
        .oneshot(request("application/grpc+proto"))
        .await
        .unwrap();
    assert_eq!(grpc.status(), 200);
    assert_eq!(grpc.headers()["grpc-status"], "8");
    assert_eq!(grpc.headers()["content-type"], "application/grpc");
    assert!(grpc.body().is_empty(), "trailers-only: no body");

    let json = svc.oneshot(request("application/json")).await.unwrap();
    assert_eq!(json.status(), 429);
    assert_eq!(json.headers()["content-type"], "application/problem+json");
    assert!(json.headers().get("grpc-status").is_none());
    let body: serde_json::Value = serde_json::from_slice(json.body()).unwrap();
    assert_eq!(body["status"], 429);
}
