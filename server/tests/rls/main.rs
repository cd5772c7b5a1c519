//! tollgate-server in process: a tonic client against the server on a loopback port, for
//! every mapping rule, the cost rules, all or nothing, every response field, unknown domains
//! and malformed requests; the admin routes and `--state` across a restart. Time is the limiter's mock clock: waits are exact and nothing
//! sleeps.

mod admin;
mod domains;
mod fuzz_corpus;
mod hits;
mod http_side;
mod listeners;
mod malformed;
mod mapping;
mod response;
mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use tollgate::quanta;
use tollgate::{Limiter, Profile};
use tollgate_server::admin::{Admin, AdminToken};
use tollgate_server::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tollgate_server::envoy_types::pb::google::protobuf::UInt64Value;
use tollgate_server::RateLimiter;
use tonic::transport::Channel;

/// The profile of most tests: small buckets, one class with periods Envoy has no unit for.
pub const PROFILE: &str = "\
name: rls-test
identities: { capacity: 4096, tenant_share: 1 }
route_classes:
  read:
    burst:     { tokens: 3, per: 1s }
    sustained: { tokens: 100, per: 1h }
  write:
    burst:     { tokens: 2, per: 1s }
    sustained: { tokens: 50, per: 1h }
  odd:
    burst:     { tokens: 2, per: 1500ms }
    sustained: { tokens: 10, per: 90s }
catalog:
  throttled: { code: rate_limited, type: \"https://errors.example.com/rate-limited\" }
descriptors:
  domain: edge
  rules:
    - { when: { generic_key: reports }, tenant: tenant, principal: user, class: odd }
    - { tenant: tenant, principal: user, class_from: class }
    - { tenant: tenant, principal: user, class: read }
    - { anonymous: remote_address, class: read }
";

/// A running server: its gRPC client, its HTTP address, its clock, and the way to stop it.
pub struct Server {
    pub client: RateLimitServiceClient<Channel>,
    pub http: SocketAddr,
    pub clock: Arc<quanta::Mock>,
    pub limiter: Arc<RateLimiter<Limiter>>,
    pub profile_path: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), String>>>,
}

impl Server {
    /// Stops the server and waits until it has.
    pub async fn stop(mut self) {
        let _ = self.stop.take().expect("running").send(());
        self.task.take().expect("running").await.unwrap().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        let _ = std::fs::remove_file(&self.profile_path);
    }
}

/// A fresh file for a profile, removed when its server is dropped.
pub fn profile_file(yaml: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "tollgate-server-test-{}-{}.yaml",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Starts a server on `yaml` over the embedded limiter on a mock clock.
pub async fn start(yaml: &str) -> Server {
    let path = profile_file(yaml);
    let (clock, mock) = quanta::Clock::mock();
    let profile = Profile::from_path(&path).unwrap();
    let backend = Limiter::builder(profile).clock(clock).build().unwrap();
    start_on(path, Arc::new(backend), mock, None).await
}

/// Starts a server over `backend` (built from the profile at `path`, on `mock`), with the
/// admin routes for `admin_token` if given.
pub async fn start_on(
    path: PathBuf,
    backend: Arc<Limiter>,
    mock: Arc<quanta::Mock>,
    admin_token: Option<&str>,
) -> Server {
    let metrics = metrics();
    let limiter = Arc::new(RateLimiter::new(backend).unwrap());
    let admin = admin_token.map(|t| {
        Arc::new(Admin::new(
            Arc::clone(&limiter),
            AdminToken::new(t).unwrap(),
            Some(path.clone()),
            false,
        ))
    });
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (grpc_addr, http_addr) = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(tollgate_server::serve_with(
        Arc::clone(&limiter),
        grpc,
        Some(http),
        Some(metrics),
        admin,
        tollgate_server::Policies::default(),
        async {
            let _ = rx.await;
        },
    ));
    let client = RateLimitServiceClient::connect(format!("http://{grpc_addr}"))
        .await
        .unwrap();
    Server {
        client,
        http: http_addr,
        clock: mock,
        limiter,
        profile_path: path,
        stop: Some(tx),
        task: Some(task),
    }
}

/// The process's Prometheus recorder, installed once before the first limiter is built.
pub fn metrics() -> metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: OnceLock<metrics_exporter_prometheus::PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .unwrap()
        })
        .clone()
}

/// A descriptor of these entries, with no cost of its own.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// A descriptor with its own `hits_addend`.
pub fn desc_hits(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: hits }),
        ..desc(entries)
    }
}

/// A request for `domain` with these descriptors and request-level `hits_addend`.
pub fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: hits,
    }
}

/// Alice of acme, route class `class` (by entry).
pub fn alice(class: &str) -> RateLimitDescriptor {
    desc(&[("tenant", "acme"), ("user", "alice"), ("class", class)])
}

/// Sends `r` and returns the response (panics on a gRPC error).
pub async fn ask(s: &mut Server, r: RateLimitRequest) -> RateLimitResponse {
    s.client.should_rate_limit(r).await.unwrap().into_inner()
}

/// Sends `r` and returns the gRPC error (panics on a response).
pub async fn refused(s: &mut Server, r: RateLimitRequest) -> tonic::Status {
    s.client.should_rate_limit(r).await.unwrap_err()
}

pub const OK: i32 = 1;
pub const OVER_LIMIT: i32 = 2;

/// The value of a header Envoy is asked to add.
pub fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}
