//! The floor for `server/benches/rls_servers.sh`: a gRPC RLS v3 server on the same tonic stack as
//! tollgate-server that answers `OK` to every request without looking at it. What it costs per
//! call is tonic's, hyper's and the kernel's; what tollgate-server costs above it is tollgate's.
//!
//! `cargo run --release -p tollgate-server --example rls_floor -- 127.0.0.1:8081`

use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tonic::{Request, Response, Status};

struct AlwaysOk;

#[tonic::async_trait]
impl RateLimitService for AlwaysOk {
    async fn should_rate_limit(
        &self,
        _: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..RateLimitResponse::default()
        }))
    }
}

#[tokio::main]
async fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8081".into());
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    // The same transport settings as tollgate-server's (server/src/serve.rs).
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(RateLimitServiceServer::new(AlwaysOk))
        .serve_with_incoming(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
        )
        .await
        .expect("serve");
}
