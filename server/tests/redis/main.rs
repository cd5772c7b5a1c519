//! `--redis`: two servers over one real `redis-server` (started on a free loopback port by the
//! testkit harness) share each caller's bucket; with Redis down, answers are `UNAVAILABLE`.
//! Feature `redis`: `cargo test -p tollgate-server --features redis --test redis`.

use std::sync::Arc;

use tollgate::redis::RedisLimiter;
use tollgate::Profile;
use tollgate_server::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_server::RateLimiter;
use tollgate_testkit::redis_server::RedisServer;

const PROFILE: &str = "\
name: rls-redis
identities: { capacity: 1024 }
route_classes:
  write:
    burst:     { tokens: 2, per: 1h }
    sustained: { tokens: 50, per: 1d }
descriptors:
  domain: edge
  rules:
    - { tenant: tenant, principal: user, class: write }
";

fn alice() -> RateLimitRequest {
    let e = |k: &str, v: &str| Entry {
        key: k.into(),
        value: v.into(),
    };
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![e("tenant", "acme"), e("user", "alice")],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

async fn server(redis: &RedisServer) -> RateLimiter<RedisLimiter> {
    let limiter = RedisLimiter::connect(&redis.url(), Profile::from_yaml(PROFILE).unwrap())
        .await
        .unwrap();
    RateLimiter::new(Arc::new(limiter)).unwrap()
}

#[tokio::test]
async fn two_servers_share_buckets_and_fail_closed() {
    let mut redis = RedisServer::start();
    let (a, b) = (server(&redis).await, server(&redis).await);
    let code = |r: Result<_, tonic::Status>| {
        r.map(|r: tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| r.overall_code)
    };
    assert_eq!(code(a.should_rate_limit(&alice(), None).await).unwrap(), 1);
    assert_eq!(code(b.should_rate_limit(&alice(), None).await).unwrap(), 1);
    // The bucket of 2 is shared: both servers now refuse.
    assert_eq!(code(a.should_rate_limit(&alice(), None).await).unwrap(), 2);
    assert_eq!(code(b.should_rate_limit(&alice(), None).await).unwrap(), 2);
    redis.kill();
    let e = b.should_rate_limit(&alice(), None).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert_eq!(e.message(), "limiter_unavailable");
}
