//! Serving both faces until a shutdown signal: gRPC on one listener, HTTP on the other, each
//! under its [`Policy`] (caps, deadlines, HTTP/2 limits: `tollgate_ops::listener`), each
//! finishing the requests in flight before it returns.

use std::future::Future;
use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tollgate_ops::{Policy, Protocol};

use crate::admin::Admin;
use crate::backend::Backend;
use crate::decide::RateLimiter;

/// The policies of the two listeners.
#[derive(Clone, Debug)]
pub struct Policies {
    /// The gRPC listener Envoy calls.
    pub grpc: Policy,
    /// The HTTP listener (health, metrics, discovery, admin: bodies up to a profile's size).
    pub http: Policy,
}

impl Default for Policies {
    fn default() -> Self {
        Policies::from(Policy::default())
    }
}

impl From<Policy> for Policies {
    /// `policy` for both, the HTTP side's bodies up to a profile's size (`PUT /admin/profile`).
    fn from(policy: Policy) -> Self {
        Policies {
            http: Policy {
                max_body: tollgate::profile::MAX_PROFILE_BYTES,
                ..policy.clone()
            },
            grpc: policy,
        }
    }
}

/// Serves `limiter`: RLS on `grpc`, the HTTP side on `http` (if any), until `shutdown`
/// completes; then stops accepting, lets requests in flight finish, and returns.
pub async fn serve<B: Backend>(
    limiter: Arc<RateLimiter<B>>,
    grpc: TcpListener,
    http: Option<TcpListener>,
    metrics: Option<PrometheusHandle>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    serve_with(
        limiter,
        grpc,
        http,
        metrics,
        None,
        Policies::default(),
        shutdown,
    )
    .await
}

/// [`serve`], with the admin routes ([`crate::admin`]) on the HTTP side when `admin` is given,
/// and the listeners under `policies`.
pub async fn serve_with<B: Backend>(
    limiter: Arc<RateLimiter<B>>,
    grpc: TcpListener,
    http: Option<TcpListener>,
    metrics: Option<PrometheusHandle>,
    admin: Option<Arc<Admin<B>>>,
    policies: Policies,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let http_task = http.map(|listener| {
        let mut router = crate::http::router(Arc::clone(&limiter), metrics);
        if let Some(admin) = admin {
            router = router.merge(crate::admin::router(admin));
        }
        let (rx, policy) = (stop_rx.clone(), policies.http.clone());
        tokio::spawn(async move {
            tollgate_ops::serve(listener, router, policy, Protocol::Http1, stopped(rx))
                .await
                .map_err(|e| format!("http: {e}"))
        })
    });
    let grpc_task = {
        let router = tonic::service::Routes::new(crate::grpc::service(Arc::clone(&limiter)))
            .into_axum_router();
        let (rx, policy) = (stop_rx.clone(), policies.grpc);
        tokio::spawn(async move {
            tollgate_ops::serve(grpc, router, policy, Protocol::Grpc, stopped(rx))
                .await
                .map_err(|e| format!("grpc: {e}"))
        })
    };
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let joined = |r: Result<Result<(), String>, tokio::task::JoinError>| {
        r.map_err(|e| format!("server task: {e}")).and_then(|r| r)
    };
    joined(grpc_task.await)?;
    if let Some(h) = http_task {
        joined(h.await)?;
    }
    Ok(())
}
