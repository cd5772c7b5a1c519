//! `tollgate-server`: the Envoy rate limit service (`--help` lists every flag). SIGHUP or an
//! edit of the profile reloads it; SIGTERM or ctrl-c stops it after the requests in flight
//! (and, with `--state`, saves the quotas). `TOLLGATE_ADMIN_TOKEN` turns on `GET`/`PUT
//! /admin/profile` on the `--http` listener; `--state` needs `TOLLGATE_KEY_SECRET`. With
//! `--redis` and `--watch-profile NAME` the server follows the profile published to Redis under
//! `NAME` (the file is the starting profile only, and is not watched).
//!
//! `tollgate-server publish` validates a profile and publishes it to Redis for every server
//! watching its name; `tollgate-server fleet-key` makes a key pair to sign what is published.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::net::TcpListener;
use tollgate::{Limiter, Profile};
use tollgate_ops::flags::{listen, Listen, ListenerFlags, StateFlags};
use tollgate_ops::shutdown::terminated;
use tollgate_ops::state;
use tollgate_server::admin::{Admin, AdminToken, FollowingFleet};
use tollgate_server::{publish, reload, serve_with, Backend, Policies, RateLimiter};

/// tollgate as an Envoy rate limit service (gRPC RLS v3), with its HTTP side.
#[derive(Parser, Debug)]
#[command(
    name = "tollgate-server",
    version,
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: Args,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Validate a profile and publish it to Redis as the next version of a fleet profile.
    Publish(publish::PublishArgs),
    /// Print a new key pair for signed fleet profiles (the signing key, then the public key).
    FleetKey,
}

#[derive(clap::Args, Debug)]
struct Args {
    /// The profile (YAML), with its `descriptors:` section.
    #[arg(long, value_name = "PATH", required = true)]
    profile: Option<PathBuf>,
    /// The gRPC listener (RLS v3).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    grpc: SocketAddr,
    /// The HTTP listener (health, metrics, the discovery document, admin), or `off`.
    #[arg(long, value_name = "ADDR|off", default_value = "127.0.0.1:8080", value_parser = listen)]
    http: Listen,
    /// State in Redis, shared by several servers (redis://, rediss://, redis+cluster://,
    /// redis+sentinel://).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    #[command(flatten)]
    state: StateFlags,
    /// Serve the admin routes to peers other than loopback.
    #[arg(long)]
    admin_remote: bool,
    /// Keep an admin `PUT` in memory instead of writing it to the profile file.
    #[arg(long)]
    admin_in_memory: bool,
    /// Follow the fleet profile published to Redis under this name (with --redis).
    #[arg(long, value_name = "NAME", requires = "redis")]
    watch_profile: Option<String>,
    /// A public key (64 hex digits) a fleet profile must be signed by; repeatable.
    #[arg(
        long = "fleet-public-key",
        value_name = "HEX",
        env = "TOLLGATE_FLEET_PUBLIC_KEYS",
        value_delimiter = ',',
        requires = "watch_profile"
    )]
    fleet_keys: Vec<String>,
    #[command(flatten)]
    listeners: ListenerFlags,
}

impl Args {
    fn profile(&self) -> &PathBuf {
        self.profile.as_ref().expect("clap requires --profile")
    }

    fn check(&self) -> Result<(), String> {
        if self.redis.is_some() && self.state.path.is_some() {
            return Err(
                "--state is for the embedded limiter: with --redis the quotas live in \
                        Redis and survive a restart of the server already"
                    .into(),
            );
        }
        Ok(())
    }
}

async fn run<B: Backend>(
    limiter: Arc<RateLimiter<B>>,
    args: Args,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
) -> Result<(), String> {
    let admin = match AdminToken::from_env()? {
        Some(token) if args.http.0.is_some() => {
            let save_to = (!args.admin_in_memory).then(|| args.profile().clone());
            let admin = Admin::new(Arc::clone(&limiter), token, save_to, args.admin_remote);
            Some(Arc::new(match &args.watch_profile {
                Some(name) => admin.following_fleet(name),
                None => admin,
            }))
        }
        Some(_) => {
            tracing::warn!("TOLLGATE_ADMIN_TOKEN is set but --http is off: no admin routes");
            None
        }
        None => None,
    };
    let grpc = TcpListener::bind(args.grpc)
        .await
        .map_err(|e| format!("--grpc {}: {e}", args.grpc))?;
    let http = match args.http.0 {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .map_err(|e| format!("--http {a}: {e}"))?,
        ),
        None => None,
    };
    tracing::info!(
        grpc = %args.grpc,
        http = ?args.http.0,
        profile = %args.profile().display(),
        backend = limiter.backend().kind(),
        admin = admin.is_some(),
        domain = limiter.profile().descriptors.as_ref().map(|d| d.domain.as_str()).unwrap_or(""),
        "tollgate-server listening"
    );
    // A server that follows a fleet profile does not also follow its file: one source.
    let watcher = args
        .watch_profile
        .is_none()
        .then(|| tokio::spawn(reload::watch(Arc::clone(&limiter), args.profile().clone())));
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
    let policies = Policies::from(args.listeners.policy());
    let result = serve_with(
        limiter,
        grpc,
        http,
        Some(metrics),
        admin,
        policies,
        terminated(),
    )
    .await;
    if let Some(w) = watcher {
        w.abort();
    }
    result
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let fail = |e: String| -> ! {
        tracing::error!("{e}");
        std::process::exit(1);
    };
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::FleetKey) => {
            println!("{}", publish::new_key_pair());
            std::process::exit(0);
        }
        Some(Command::Publish(p)) => {
            let code = match publish::run(p).await {
                Ok(line) => {
                    println!("{line}");
                    0
                }
                Err(e) => {
                    eprintln!("tollgate-server publish: {e}");
                    1
                }
            };
            std::process::exit(code);
        }
        None => cli.serve,
    };
    if let Err(e) = args.check() {
        eprintln!("tollgate-server: {e}");
        std::process::exit(2);
    }
    let state_file = args.state.state_file();
    let profile = Profile::from_path(args.profile()).unwrap_or_else(|e| fail(e.to_string()));
    // The recorder first: the limiter registers its metric handles when it is built.
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .unwrap_or_else(|e| fail(format!("metrics: {e}")));
    let result = match args.redis.clone() {
        None => {
            let limiter = state::open(
                Limiter::builder(profile).key_secret_from_env(),
                state_file.as_ref(),
            )
            .unwrap_or_else(|e| fail(format!("limiter: {e}")));
            let limiter = Arc::new(limiter);
            let checkpoint = state_file
                .as_ref()
                .map(|s| state::checkpoint(&limiter, s).unwrap_or_else(|e| fail(e)));
            let served = match RateLimiter::new(limiter) {
                Ok(l) => run(Arc::new(l), args, metrics).await,
                Err(e) => Err(e),
            };
            // After the requests in flight: the last decisions are in the snapshot.
            let saved = checkpoint.map_or(Ok(()), state::finish);
            served.and(saved)
        }
        Some(url) => redis(url, profile, args, metrics).await,
    };
    if let Err(e) = result {
        fail(e);
    }
    tracing::info!("stopped");
}

#[cfg(feature = "redis")]
async fn redis(
    url: String,
    profile: Profile,
    args: Args,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
) -> Result<(), String> {
    let limiter = tollgate::redis::RedisLimiter::connect(&url, profile)
        .await
        .map_err(|e| format!("--redis: {e}"))?;
    let limiter = Arc::new(RateLimiter::new(Arc::new(limiter))?);
    // Kept until the server stops: dropping it stops following the fleet profile.
    let _fleet = match &args.watch_profile {
        Some(name) => {
            let watch = tollgate_server::fleet::watch(&limiter, name, &args.fleet_keys).await?;
            tracing::info!(
                name = %name,
                version = ?limiter.backend().profile_version(),
                "following the fleet profile"
            );
            Some(watch)
        }
        None => None,
    };
    let result = run(limiter.clone(), args, metrics).await;
    // The tokens this worker leased and did not spend go back before it exits.
    let returned = limiter.backend().return_leases().await;
    if returned > 0 {
        tracing::info!(tokens = returned, "leased tokens given back");
    }
    result
}

#[cfg(not(feature = "redis"))]
async fn redis(
    _: String,
    _: Profile,
    _: Args,
    _: metrics_exporter_prometheus::PrometheusHandle,
) -> Result<(), String> {
    Err(
        "--redis needs a tollgate-server built with the `redis` feature \
         (cargo build -p tollgate-server --features redis)"
            .into(),
    )
}
