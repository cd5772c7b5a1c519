//! `tollgate-server --profile PATH [--grpc 127.0.0.1:8081] [--http 127.0.0.1:8080|off]
//! [--redis URL] [--state PATH [--state-every S] [--state-start-empty-on-refusal]]
//! [--admin-remote] [--admin-in-memory] [--watch-profile NAME]`: the Envoy rate limit service. SIGHUP or an edit of
//! the profile reloads it; SIGTERM or ctrl-c stops it after the requests in flight (and, with
//! `--state`, saves the quotas). `TOLLGATE_ADMIN_TOKEN` turns on `GET`/`PUT /admin/profile` on
//! the `--http` listener; `--state` needs `TOLLGATE_KEY_SECRET`. With `--redis` and
//! `--watch-profile NAME` the server follows the profile published to Redis under `NAME`
//! (the file is the starting profile only, and is not watched).
//!
//! `tollgate-server publish --redis URL --profile PATH [--name NAME] [--key-prefix P]`
//! validates the profile and publishes it to Redis for every server watching `NAME` (default:
//! the profile's `name`), printing the new version; an invalid profile is refused with its
//! line and column and nothing is written.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tollgate::{Limiter, Profile};
use tollgate_server::admin::{Admin, AdminToken, FollowingFleet};
use tollgate_server::state::{self, State};
use tollgate_server::{publish, reload, serve_with, Backend, RateLimiter};

const USAGE: &str = "tollgate-server --profile PATH [--grpc ADDR] [--http ADDR|off] [--redis URL] \
                     [--state PATH [--state-every S] [--state-start-empty-on-refusal]] \
                     [--admin-remote] [--admin-in-memory] [--watch-profile NAME \
                     [--fleet-public-key HEX]...]\n       \
                     tollgate-server publish --redis URL --profile PATH [--name NAME] \
                     [--key-prefix P] [--signing-key-file PATH]\n       \
                     tollgate-server fleet-key";

/// The fleet public keys, comma- or space-separated, beside `--fleet-public-key`.
const FLEET_KEYS_ENV: &str = "TOLLGATE_FLEET_PUBLIC_KEYS";

struct Args {
    profile: PathBuf,
    grpc: SocketAddr,
    http: Option<SocketAddr>,
    redis: Option<String>,
    state: Option<State>,
    admin_remote: bool,
    admin_in_memory: bool,
    /// `--watch-profile`: the fleet profile to follow (with `--redis`).
    watch_profile: Option<String>,
    /// `--fleet-public-key` (repeatable) and `TOLLGATE_FLEET_PUBLIC_KEYS`: the keys a fleet
    /// profile must be signed by, as hex.
    fleet_keys: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut profile = None;
    let mut args = Args {
        profile: PathBuf::new(),
        grpc: "127.0.0.1:8081".parse().expect("a valid default address"),
        http: Some("127.0.0.1:8080".parse().expect("a valid default address")),
        redis: None,
        state: None,
        admin_remote: false,
        admin_in_memory: false,
        watch_profile: None,
        fleet_keys: std::env::var(FLEET_KEYS_ENV)
            .map(|v| {
                v.split([',', ' ', '\n'])
                    .filter(|k| !k.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
    };
    let (mut every, mut start_empty) = (None, false);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--profile" => profile = Some(PathBuf::from(value()?)),
            "--grpc" => {
                let v = value()?;
                args.grpc = v.parse().map_err(|e| format!("--grpc {v}: {e}"))?;
            }
            "--http" => {
                let v = value()?;
                args.http = match v.as_str() {
                    "off" => None,
                    a => Some(a.parse().map_err(|e| format!("--http {v}: {e}"))?),
                };
            }
            "--redis" => args.redis = Some(value()?),
            "--state" => args.state = Some(State::new(PathBuf::from(value()?))),
            "--state-every" => {
                let v = value()?;
                let secs: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| format!("--state-every {v}: a number of seconds above 0"))?;
                every = Some(Duration::from_secs_f64(secs));
            }
            "--state-start-empty-on-refusal" => start_empty = true,
            "--admin-remote" => args.admin_remote = true,
            "--admin-in-memory" => args.admin_in_memory = true,
            "--watch-profile" => args.watch_profile = Some(value()?),
            "--fleet-public-key" => args.fleet_keys.push(value()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}; usage: {USAGE}")),
        }
    }
    args.profile = profile.ok_or_else(|| format!("--profile is needed; usage: {USAGE}"))?;
    match &mut args.state {
        Some(state) => {
            if let Some(every) = every {
                state.every = every;
            }
            state.start_empty_on_refusal = start_empty;
        }
        None if every.is_some() || start_empty => {
            return Err("--state-every and --state-start-empty-on-refusal need --state".into())
        }
        None => {}
    }
    if !args.fleet_keys.is_empty() && args.watch_profile.is_none() {
        return Err(format!(
            "--fleet-public-key (or {FLEET_KEYS_ENV}) checks a fleet profile's signature: it \
             needs --watch-profile"
        ));
    }
    if args.watch_profile.is_some() && args.redis.is_none() {
        return Err(
            "--watch-profile follows a profile published to Redis: it needs --redis".into(),
        );
    }
    if args.redis.is_some() && args.state.is_some() {
        return Err(
            "--state is for the embedded limiter: with --redis the quotas live in \
                    Redis and survive a restart of the server already"
                .into(),
        );
    }
    Ok(args)
}

/// Completes on SIGTERM or ctrl-c.
async fn terminated() {
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: finishing requests in flight"),
        _ = tokio::signal::ctrl_c() => tracing::info!("ctrl-c: finishing requests in flight"),
    }
}

async fn run<B: Backend>(
    limiter: Arc<RateLimiter<B>>,
    args: Args,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
) -> Result<(), String> {
    let admin = match AdminToken::from_env()? {
        Some(token) if args.http.is_some() => {
            let save_to = (!args.admin_in_memory).then(|| args.profile.clone());
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
    let http = match args.http {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .map_err(|e| format!("--http {a}: {e}"))?,
        ),
        None => None,
    };
    tracing::info!(
        grpc = %args.grpc,
        http = ?args.http,
        profile = %args.profile.display(),
        backend = limiter.backend().kind(),
        admin = admin.is_some(),
        domain = limiter.profile().descriptors.as_ref().map(|d| d.domain.as_str()).unwrap_or(""),
        "tollgate-server listening"
    );
    // A server that follows a fleet profile does not also follow its file: one source.
    let watcher = args
        .watch_profile
        .is_none()
        .then(|| tokio::spawn(reload::watch(Arc::clone(&limiter), args.profile.clone())));
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
    let result = serve_with(limiter, grpc, http, Some(metrics), admin, terminated()).await;
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
    if std::env::args().nth(1).as_deref() == Some("fleet-key") {
        println!("{}", publish::new_key_pair());
        std::process::exit(0);
    }
    if std::env::args().nth(1).as_deref() == Some("publish") {
        let code = match publish::run(std::env::args().skip(2)).await {
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
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("tollgate-server: {e}");
        std::process::exit(2);
    });
    let profile = Profile::from_path(&args.profile).unwrap_or_else(|e| fail(e.to_string()));
    // The recorder first: the limiter registers its metric handles when it is built.
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .unwrap_or_else(|e| fail(format!("metrics: {e}")));
    let result = match args.redis.clone() {
        None => {
            let limiter = state::open(
                Limiter::builder(profile).key_secret_from_env(),
                args.state.as_ref(),
            )
            .unwrap_or_else(|e| fail(format!("limiter: {e}")));
            let limiter = Arc::new(limiter);
            let checkpoint = args
                .state
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
    run(limiter, args, metrics).await
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
