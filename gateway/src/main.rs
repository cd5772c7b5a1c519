//! `tollgate-gateway`: the demo API, tollgate in front of a small axum service (`--help` for
//! every flag).
//!
//! Routes: `GET /v1/items`, `POST /v1/items`, `POST /v1/register`, `POST /v1/reports/run`
//! (limited by the profile's `routes`) and `GET /.well-known/rate-limits` (the discovery
//! document). `Authorization: Bearer <token>` with a token from the tokens file is an
//! authenticated caller; no header is the anonymous class.
//!
//! The operators' listener (`--operator-listen`, loopback by default) serves `GET /metrics`
//! (Prometheus text: global counts, so kept off the public listener) and, when
//! `TOLLGATE_ADMIN_TOKEN` is set, `GET` / `PUT /admin/profile` for loopback peers (any peer with
//! `--admin-remote`); an accepted profile is written to the profile file unless
//! `--admin-in-memory`.
//!
//! The profile is reloaded on SIGHUP and when its file changes, without a restart; a bad edit is
//! logged and the old profile stays in force. With `--state`, quotas survive a restart (needs
//! `TOLLGATE_KEY_SECRET`). With `--redis URL` (feature `redis`) the buckets live in Redis and
//! every gateway on the same server shares them; route classes with a `lease` decide locally
//! from tokens leased ahead, and their unspent rest goes back when the gateway stops. SIGTERM
//! or ctrl-c stops it after the requests in flight. Both listeners run under `tollgate_ops`'s
//! listener policy (caps, deadlines, body limit).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use metrics_exporter_prometheus::PrometheusHandle;
use tollgate::http::admin::{AdminToken, ADMIN_TOKEN_ENV};
use tollgate::{Limiter, Profile};
use tollgate_gateway::app;
use tollgate_gateway::backend::Backend;
use tollgate_ops::flags::{listen, Listen, ListenerFlags, StateFlags};
use tollgate_ops::{shutdown, state, Protocol};

/// tollgate's demo gateway: a small API behind tollgate, with metrics and an admin endpoint on
/// the operators' listener. Admin routes need TOLLGATE_ADMIN_TOKEN (at least 32 bytes);
/// --state needs TOLLGATE_KEY_SECRET.
#[derive(Parser, Debug)]
#[command(name = "tollgate-gateway", version)]
struct Args {
    /// The public listener.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The operators' listener (metrics, admin), or `off`.
    #[arg(long, value_name = "ADDR|off", default_value = "127.0.0.1:9090", value_parser = listen)]
    operator_listen: Listen,
    /// The profile (YAML), reloaded on SIGHUP and when it changes.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "examples/profiles/example.yaml"
    )]
    profile: PathBuf,
    /// Bearer tokens and the identities they stand for (YAML).
    #[arg(long, value_name = "FILE", default_value = "examples/tokens.yaml")]
    tokens: PathBuf,
    /// Serve the admin routes to peers other than loopback.
    #[arg(long)]
    admin_remote: bool,
    /// Keep an accepted admin PUT in memory instead of writing it to the profile file.
    #[arg(long)]
    admin_in_memory: bool,
    /// Buckets in Redis, shared by every gateway on it (redis://, rediss://,
    /// redis+cluster://, redis+sentinel://); needs a gateway built with the `redis` feature.
    #[arg(long, value_name = "URL", conflicts_with = "path")]
    redis: Option<String>,
    #[command(flatten)]
    state: StateFlags,
    #[command(flatten)]
    listeners: ListenerFlags,
}

fn fail(what: &str, e: &dyn std::fmt::Display) -> ! {
    tracing::error!("{what}: {e}");
    std::process::exit(1);
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let profile = Profile::from_path(&args.profile).unwrap_or_else(|e| fail("profile", &e));
    let tokens = app::Tokens::from_path(&args.tokens).unwrap_or_else(|e| fail("tokens", &e));
    let admin_token = AdminToken::from_env().unwrap_or_else(|e| fail("admin token", &e));
    // The recorder first: the limiter registers its metric handles when it is built.
    let metrics = app::prometheus()
        .install_recorder()
        .unwrap_or_else(|e| fail("metrics", &e));
    let result = match args.redis.clone() {
        None => embedded(profile, &args, tokens, admin_token, metrics).await,
        Some(url) => redis(url, profile, &args, tokens, admin_token, metrics).await,
    };
    if let Err(e) = result {
        fail("gateway", &e);
    }
    tracing::info!("stopped");
}

/// The embedded limiter, its quotas kept across restarts with `--state`.
async fn embedded(
    profile: Profile,
    args: &Args,
    tokens: app::Tokens,
    admin_token: Option<AdminToken>,
    metrics: PrometheusHandle,
) -> Result<(), String> {
    let state_file = args.state.state_file();
    // Listed tenants get a label of their own (bounded: the rest are `other`), for the
    // dashboard's "limit hits by tenant".
    let builder = Limiter::builder(profile)
        .per_tenant_metrics(true)
        .key_secret_from_env();
    let limiter =
        Arc::new(state::open(builder, state_file.as_ref()).unwrap_or_else(|e| fail("limiter", &e)));
    let checkpoint = state_file
        .as_ref()
        .map(|s| state::checkpoint(&limiter, s).unwrap_or_else(|e| fail("state", &e)));

    let served = serve(Arc::clone(&limiter), args, tokens, admin_token, metrics).await;
    // After the requests in flight: the last decisions are in the snapshot.
    let saved = checkpoint.map_or(Ok(()), state::finish);
    served.and(saved)
}

/// The Redis limiter: connected before the listeners open, its leases given back after they
/// close.
#[cfg(feature = "redis")]
async fn redis(
    url: String,
    profile: Profile,
    args: &Args,
    tokens: app::Tokens,
    admin_token: Option<AdminToken>,
    metrics: PrometheusHandle,
) -> Result<(), String> {
    let limiter = tollgate::redis::RedisLimiter::builder(&url, profile)
        .per_tenant_metrics(true)
        .connect()
        .await
        .map_err(|e| format!("--redis: {e}"))?;
    tracing::info!(store = limiter.store_program(), "buckets in Redis");
    let limiter = Arc::new(limiter);
    let served = serve(Arc::clone(&limiter), args, tokens, admin_token, metrics).await;
    // The tokens this gateway leased and did not spend go back before it exits.
    let returned = limiter.return_leases().await;
    if returned > 0 {
        tracing::info!(tokens = returned, "leased tokens given back");
    }
    served
}

#[cfg(not(feature = "redis"))]
async fn redis(
    _: String,
    _: Profile,
    _: &Args,
    _: app::Tokens,
    _: Option<AdminToken>,
    _: PrometheusHandle,
) -> Result<(), String> {
    Err("--redis needs a gateway built with the `redis` feature \
         (cargo build -p tollgate-gateway --features redis)"
        .into())
}

/// Serves both listeners over `limiter` until SIGTERM or ctrl-c, following the profile file.
async fn serve<B: Backend>(
    limiter: Arc<B>,
    args: &Args,
    tokens: app::Tokens,
    admin_token: Option<AdminToken>,
    metrics: PrometheusHandle,
) -> Result<(), String> {
    let watched = (Arc::clone(&limiter), args.profile.clone());
    tokio::spawn(tollgate_ops::watch::watch(
        args.profile.clone(),
        move |why| {
            let (limiter, path) = (&watched.0, &watched.1);
            match app::reload(&**limiter, path) {
                Ok(()) => tracing::info!(profile = %path.display(), why, "profile reloaded"),
                Err(e) => {
                    tracing::warn!(profile = %path.display(), why, error = %e, "profile not reloaded; the old one stays in force")
                }
            }
        },
    ));
    {
        let handle = metrics.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(Duration::from_secs(5));
            loop {
                t.tick().await;
                handle.run_upkeep();
            }
        });
    }

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let operators = match args.operator_listen.0 {
        None => {
            if admin_token.is_some() {
                tracing::warn!("--operator-listen off: the admin routes are not served");
            }
            None
        }
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .unwrap_or_else(|e| fail("operator listen", &e));
            let mut router = app::operator_router(metrics);
            match admin_token {
                None => tracing::info!(
                    "admin routes off: set {ADMIN_TOKEN_ENV} to serve GET/PUT /admin/profile"
                ),
                Some(token) => {
                    let save_to = (!args.admin_in_memory).then(|| args.profile.clone());
                    let remote = args.admin_remote;
                    if !addr.ip().is_loopback() && !remote {
                        tracing::warn!(listen = %addr, "the operators' listener is not on loopback: the admin routes refuse remote peers (403) unless --admin-remote");
                    }
                    tracing::info!(saved_to = ?save_to, remote, "admin routes on: GET/PUT /admin/profile");
                    router = router.merge(app::admin_router(
                        Arc::clone(&limiter),
                        token,
                        save_to,
                        remote,
                    ));
                }
            }
            tracing::info!(listen = %addr, "operator endpoints (GET /metrics) listening");
            let policy = args.listeners.operator_policy();
            let done = stopped(stop_rx.clone());
            Some(tokio::spawn(tollgate_ops::serve(
                listener,
                router,
                policy,
                Protocol::Http1,
                done,
            )))
        }
    };
    let router = app::router(Arc::clone(&limiter), tokens, args.listeners.trusted.clone());
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .unwrap_or_else(|e| fail("listen", &e));
    let policy = args.listeners.policy();
    tracing::info!(
        listen = %args.listen,
        profile = %args.profile.display(),
        max_connections = policy.max_connections,
        "gateway listening"
    );
    let public = tollgate_ops::serve(listener, router, policy, Protocol::Http1, async move {
        shutdown::terminated().await;
        let _ = stop_tx.send(true);
    });
    if let Err(e) = public.await {
        fail("serve", &e);
    }
    if let Some(op) = operators {
        match op.await {
            Ok(Err(e)) => tracing::error!(error = %e, "operator listener stopped"),
            Err(e) => tracing::error!(error = %e, "operator listener task"),
            Ok(Ok(())) => {}
        }
    }
    Ok(())
}
