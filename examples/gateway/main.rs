//! The demo API: tollgate in front of a small axum service.
//!
//! ```text
//! cargo run --release --example gateway -- [--listen 127.0.0.1:8080]
//!     [--profile examples/profiles/example.yaml] [--tokens examples/tokens.yaml]
//!     [--trust-proxy CIDR]... [--max-connections N] [--max-per-peer N]
//!     [--header-timeout SECONDS] [--max-body BYTES] [--operator-listen ADDR|off]
//!     [--admin-remote] [--admin-in-memory]
//!     [--state PATH [--state-every SECONDS] [--state-start-empty-on-refusal]]
//! ```
//!
//! With `--state`, quotas survive a restart (`state.rs`; needs `TOLLGATE_KEY_SECRET`).
//!
//! Routes: `GET /v1/items`, `POST /v1/items`, `POST /v1/register`, `POST /v1/reports/run`
//! (limited by the profile's `routes`) and `GET /.well-known/rate-limits` (the discovery
//! document). `GET /metrics` (Prometheus text) is on the operators' listener, `--operator-listen`
//! (127.0.0.1:9090 by default, `off` for none): its counts are global, not any caller's own.
//! `Authorization: Bearer <token>` with a token from the tokens file is an authenticated caller;
//! no header is the anonymous class.
//!
//! `GET` / `PUT /admin/profile` (read and replace the profile in force) are on the operators'
//! listener too, only when `TOLLGATE_ADMIN_TOKEN` is set, for loopback peers only unless
//! `--admin-remote`; an accepted profile is also written to the profile file unless
//! `--admin-in-memory` (`admin.rs`).
//!
//! The profile is reloaded on SIGHUP and when its file changes (mtime polled every second),
//! without a restart; a bad edit is logged and the old profile stays in force.
//!
//! Connections are capped in all and per peer address, must send each request head within the
//! header timeout (also between keep-alive requests), and bodies are limited
//! (`tollgate_ops::listener`).

mod admin;
mod app;
mod state;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tollgate::http::Cidr;
use tollgate::{Limiter, Profile};

struct Args {
    listen: SocketAddr,
    operator_listen: Option<SocketAddr>,
    profile: PathBuf,
    tokens: PathBuf,
    trusted: Vec<Cidr>,
    limits: tollgate_ops::Policy,
    admin_remote: bool,
    admin_in_memory: bool,
    state: Option<state::State>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        listen: "127.0.0.1:8080".parse().expect("a valid default address"),
        operator_listen: Some("127.0.0.1:9090".parse().expect("a valid default address")),
        profile: "examples/profiles/example.yaml".into(),
        tokens: "examples/tokens.yaml".into(),
        trusted: Vec::new(),
        limits: tollgate_ops::Policy::default(),
        admin_remote: false,
        admin_in_memory: false,
        state: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => {
                let v = value()?;
                args.listen = v.parse().map_err(|e| format!("--listen {v}: {e}"))?;
            }
            "--operator-listen" => {
                let v = value()?;
                args.operator_listen = match v.as_str() {
                    "off" => None,
                    addr => Some(
                        addr.parse()
                            .map_err(|e| format!("--operator-listen {v}: {e}"))?,
                    ),
                };
            }
            "--profile" => args.profile = value()?.into(),
            "--tokens" => args.tokens = value()?.into(),
            "--trust-proxy" => args.trusted.push(
                value()?
                    .parse()
                    .map_err(|e| format!("--trust-proxy: {e}"))?,
            ),
            "--max-connections" => args.limits.max_connections = count(&flag, &value()?)?,
            "--max-per-peer" => args.limits.max_per_peer = count(&flag, &value()?)?,
            "--max-body" => args.limits.max_body = number(&flag, &value()?)?,
            "--state" => args.state = Some(state::State::new(value()?)),
            "--state-every" | "--state-start-empty-on-refusal" if args.state.is_none() => {
                return Err(format!("{flag} comes after --state PATH"))
            }
            "--state-every" => {
                let secs = number(&flag, &value()?)?;
                let s = args.state.as_mut().expect("checked above");
                s.every = Duration::from_secs(secs.max(1) as u64);
            }
            "--state-start-empty-on-refusal" => {
                args.state
                    .as_mut()
                    .expect("checked above")
                    .start_empty_on_refusal = true
            }
            "--header-timeout" => {
                let secs: f64 = value()?
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 3600.0)
                    .ok_or_else(|| format!("{flag}: seconds, more than 0 and at most 3600"))?;
                args.limits.header_timeout = Duration::from_secs_f64(secs);
            }
            "--admin-remote" => args.admin_remote = true,
            "--admin-in-memory" => args.admin_in_memory = true,
            "-h" | "--help" => {
                println!(
                    "gateway [--listen ADDR] [--profile FILE] [--tokens FILE] [--trust-proxy CIDR]...\n        \
                     [--max-connections N] [--max-per-peer N] [--header-timeout SECONDS] [--max-body BYTES]\n        \
                     [--operator-listen ADDR|off] [--admin-remote] [--admin-in-memory]\n        \
                     [--state PATH [--state-every SECONDS] [--state-start-empty-on-refusal]]\n\n\
                     Admin routes (GET/PUT /admin/profile on the operators' listener) need\n\
                     {} (at least {} bytes) in the environment; --state needs TOLLGATE_KEY_SECRET.",
                    admin::ADMIN_TOKEN_ENV,
                    admin::MIN_TOKEN_LEN
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(args)
}

/// A whole number of at least 0.
fn number(flag: &str, v: &str) -> Result<usize, String> {
    v.parse()
        .map_err(|_| format!("{flag} {v:?}: a whole number is needed"))
}

/// A whole number of at least 1.
fn count(flag: &str, v: &str) -> Result<usize, String> {
    match number(flag, v)? {
        0 => Err(format!("{flag}: at least 1")),
        n => Ok(n),
    }
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Reloads on SIGHUP (checked every 100 ms) and when the file's mtime changes (every second).
fn watch_profile(limiter: Arc<Limiter>, path: PathBuf, hup: Arc<AtomicBool>) {
    let mut seen = mtime(&path);
    let mut tick = 0u32;
    loop {
        std::thread::sleep(Duration::from_millis(100));
        tick = tick.wrapping_add(1);
        let signalled = hup.swap(false, Ordering::Relaxed);
        let changed = tick % 10 == 0 && {
            let now = mtime(&path);
            let changed = now != seen;
            seen = now;
            changed
        };
        if !(signalled || changed) {
            continue;
        }
        let why = if signalled { "SIGHUP" } else { "file changed" };
        match app::reload(&limiter, &path) {
            Ok(()) => tracing::info!(profile = %path.display(), why, "profile reloaded"),
            Err(e) => {
                tracing::warn!(profile = %path.display(), why, error = %e, "profile not reloaded; the old one stays in force")
            }
        }
    }
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gateway: {e}");
            std::process::exit(2);
        }
    };
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        tracing::error!("{what}: {e}");
        std::process::exit(1);
    };
    let profile = Profile::from_path(&args.profile).unwrap_or_else(|e| fail("profile", &e));
    let tokens = app::Tokens::from_path(&args.tokens).unwrap_or_else(|e| fail("tokens", &e));
    let admin_token = admin::AdminToken::from_env().unwrap_or_else(|e| fail("admin token", &e));
    // The recorder first: the limiter registers its metric handles when it is built.
    let metrics = app::prometheus()
        .install_recorder()
        .unwrap_or_else(|e| fail("metrics", &e));
    let limiter = Arc::new(
        // Listed tenants get a label of their own (bounded: the rest are `other`), for the
        // dashboard's "limit hits by tenant".
        state::open(
            Limiter::builder(profile)
                .per_tenant_metrics(true)
                .key_secret_from_env(),
            args.state.as_ref(),
        )
        .unwrap_or_else(|e| fail("limiter", &e)),
    );
    let checkpoint = args
        .state
        .as_ref()
        .map(|s| state::checkpoint(&limiter, s).unwrap_or_else(|e| fail("state", &e)));
    // Only with --state: otherwise SIGTERM and ctrl-c keep their default (exit at once).
    let shutdown = args
        .state
        .as_ref()
        .map(|_| state::shutdown_flag().unwrap_or_else(|e| fail("SIGTERM handler", &e)));

    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))
        .unwrap_or_else(|e| fail("SIGHUP handler", &e));
    {
        let (limiter, path) = (Arc::clone(&limiter), args.profile.clone());
        std::thread::spawn(move || watch_profile(limiter, path, hup));
    }
    {
        let handle = metrics.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(5));
            handle.run_upkeep();
        });
    }

    if args.operator_listen.is_none() && admin_token.is_some() {
        tracing::warn!("--operator-listen off: the admin routes are not served");
    }
    if let Some(addr) = args.operator_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| fail("operator listen", &e));
        // Few connections, few per peer; bodies up to a profile (`PUT /admin/profile`, the
        // token checked first). The public listener's deadlines.
        let operators = tollgate_ops::Policy {
            header_timeout: args.limits.header_timeout,
            ..tollgate_ops::Policy::operator()
        };
        let mut router = app::operator_router(metrics);
        match admin_token {
            None => tracing::info!(
                "admin routes off: set {} to serve GET/PUT /admin/profile",
                admin::ADMIN_TOKEN_ENV
            ),
            Some(token) => {
                let save_to = (!args.admin_in_memory).then(|| args.profile.clone());
                let remote = args.admin_remote;
                if !addr.ip().is_loopback() && !remote {
                    tracing::warn!(listen = %addr, "the operators' listener is not on loopback: the admin routes refuse remote peers (403) unless --admin-remote");
                }
                tracing::info!(saved_to = ?save_to, remote, "admin routes on: GET/PUT /admin/profile");
                let admin = admin::Admin::new(Arc::clone(&limiter), token, save_to, remote);
                router = router.merge(admin::router(Arc::new(admin)));
            }
        }
        tracing::info!(listen = %addr, "operator endpoints (GET /metrics) listening");
        tokio::spawn(async move {
            let served = tollgate_ops::serve(
                listener,
                router,
                operators,
                tollgate_ops::Protocol::Http1,
                std::future::pending(),
            );
            if let Err(e) = served.await {
                tracing::error!(error = %e, "operator listener stopped");
            }
        });
    }
    let router = app::router(Arc::clone(&limiter), tokens, args.trusted.clone());
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .unwrap_or_else(|e| fail("listen", &e));
    let limits = tollgate_ops::Policy {
        trusted: args.trusted.clone(),
        ..args.limits.within_file_limit()
    };
    tracing::info!(
        listen = %args.listen,
        profile = %args.profile.display(),
        max_connections = limits.max_connections,
        "gateway listening"
    );
    tokio::select! {
        served = tollgate_ops::serve(listener, router, limits, tollgate_ops::Protocol::Http1, std::future::pending()) => {
            served.unwrap_or_else(|e| fail("serve", &e))
        }
        () = state::signalled(shutdown) => tracing::info!("shutting down"),
    }
    if let Some(cp) = checkpoint {
        state::finish(cp);
    }
}
