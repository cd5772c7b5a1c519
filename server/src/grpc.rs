//! The gRPC face: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over tonic.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use crate::backend::Backend;
use crate::decide::RateLimiter;

/// The tonic service of a [`RateLimiter`].
pub struct Grpc<B>(pub Arc<RateLimiter<B>>);

#[tonic::async_trait]
impl<B: Backend> RateLimitService for Grpc<B> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let id = request
            .metadata()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let answer = self
            .0
            .should_rate_limit(request.get_ref(), id.as_deref())
            .await?;
        Ok(Response::new(answer))
    }
}

/// The tower service tonic's router serves.
pub fn service<B: Backend>(limiter: Arc<RateLimiter<B>>) -> RateLimitServiceServer<Grpc<B>> {
    RateLimitServiceServer::new(Grpc(limiter))
}
