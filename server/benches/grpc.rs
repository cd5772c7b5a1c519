//! `ShouldRateLimit` decisions per second over loopback gRPC: the server (embedded limiter) and
//! one multiplexed client (one HTTP/2 connection, `IN_FLIGHT` calls at a time) in this
//! process, sharing the machine's cores. Two key sets: one hot key, and 1M keys drawn at
//! random (a table of 2M identity slots). Limits are large enough that every call is a full
//! decision that admits; a refusal costs the same lookup and CAS.
//!
//! `nice cargo bench -p tollgate-server --bench grpc`

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use tollgate::{Limiter, Profile};
use tollgate_server::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_server::RateLimiter;

/// Calls in flight at once on the one connection.
const IN_FLIGHT: usize = 128;

const PROFILE: &str = "\
name: bench
identities: { capacity: 2097152, tenant_share: 1 }
route_classes:
  read:
    burst:     { tokens: 4000000000, per: 1s }
    sustained: { tokens: 4000000000, per: 1s }
descriptors:
  domain: edge
  rules:
    - { tenant: tenant, principal: user, class: read }
";

fn request(user: u32) -> RateLimitRequest {
    let entry = |k: &str, v: String| Entry {
        key: k.into(),
        value: v,
    };
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![
                entry("tenant", "acme".into()),
                entry("user", format!("u{user}")),
            ],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

fn grpc(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(async {
        let backend = Arc::new(
            Limiter::builder(Profile::from_yaml(PROFILE).unwrap())
                .build()
                .unwrap(),
        );
        let limiter = Arc::new(RateLimiter::new(backend).unwrap());
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = grpc.local_addr().unwrap();
        tokio::spawn(tollgate_server::serve(
            limiter,
            grpc,
            None,
            None,
            std::future::pending(),
        ));
        RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap()
    });
    let mut g = c.benchmark_group("should_rate_limit");
    g.throughput(Throughput::Elements(IN_FLIGHT as u64));
    for keys in [1u32, 1 << 20] {
        g.bench_with_input(
            BenchmarkId::new("loopback_grpc_keys", keys),
            &keys,
            |b, &keys| {
                let mut rng = SmallRng::seed_from_u64(7);
                b.to_async(&rt).iter(|| {
                    let calls: Vec<_> = (0..IN_FLIGHT)
                        .map(|_| {
                            let mut c = client.clone();
                            let r = request(rng.gen_range(0..keys));
                            async move {
                                let answer = c.should_rate_limit(r).await.unwrap().into_inner();
                                assert_eq!(answer.overall_code, 1);
                            }
                        })
                        .collect();
                    futures::future::join_all(calls)
                });
            },
        );
    }
    g.finish();
}

criterion_group!(benches, grpc);
criterion_main!(benches);
