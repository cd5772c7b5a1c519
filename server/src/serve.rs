//! Serving both faces until a shutdown signal: gRPC on one listener, HTTP on the other, each
//! finishing the requests in flight before it returns.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::Admin;
use crate::backend::Backend;
use crate::decide::RateLimiter;

/// Serves `limiter`: RLS on `grpc`, the HTTP side on `http` (if any), until `shutdown`
/// completes; then stops accepting, lets requests in flight finish, and returns.
pub async fn serve<B: Backend>(
    limiter: Arc<RateLimiter<B>>,
    grpc: TcpListener,
    http: Option<TcpListener>,
    metrics: Option<PrometheusHandle>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    serve_with(limiter, grpc, http, metrics, None, shutdown).await
}

/// [`serve`], with the admin routes ([`crate::admin`]) on the HTTP side when `admin` is given.
pub async fn serve_with<B: Backend>(
    limiter: Arc<RateLimiter<B>>,
    grpc: TcpListener,
    http: Option<TcpListener>,
    metrics: Option<PrometheusHandle>,
    admin: Option<Arc<Admin<B>>>,
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
        let rx = stop_rx.clone();
        tokio::spawn(async move {
            // With the peer's address: the admin routes answer loopback peers only.
            let app = router.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, app)
                .with_graceful_shutdown(stopped(rx))
                .await
                .map_err(|e| format!("http: {e}"))
        })
    });
    let grpc_task = {
        let svc = crate::grpc::service(Arc::clone(&limiter));
        let rx = stop_rx.clone();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .add_service(svc)
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(grpc).with_nodelay(Some(true)),
                    stopped(rx),
                )
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
