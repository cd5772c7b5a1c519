//! `--state PATH`: quotas that survive a restart. The gateway restores the limiter from the
//! snapshot at PATH on start, checkpoints it every `--state-every` (crash-safe), and once more
//! on SIGTERM or ctrl-c before it exits.
//!
//! A snapshot is keyed by the key secret, so `--state` needs a stable one: the environment's
//! `TOLLGATE_KEY_SECRET` (a random secret per process could never be restored). A snapshot
//! that is refused (another secret, another `identities.capacity`, a corrupt or truncated file)
//! stops the gateway with the reason, unless `--state-start-empty-on-refusal` says that losing
//! the quotas is acceptable: then it logs the refusal and starts with full buckets. A missing
//! file is a first start, not a refusal.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::snapshot::Checkpoint;
use tollgate::{Builder, Limiter};

/// The environment variable the key secret is read from.
pub const SECRET_ENV: &str = "TOLLGATE_KEY_SECRET";

/// The `--state*` flags.
#[derive(Clone, Debug)]
pub struct State {
    pub path: PathBuf,
    pub every: Duration,
    pub start_empty_on_refusal: bool,
}

impl State {
    pub fn new(path: PathBuf) -> State {
        State {
            path,
            every: Duration::from_secs(10),
            start_empty_on_refusal: false,
        }
    }
}

/// Builds the limiter: restored from `state`'s file if there is one.
pub fn open(
    builder: Builder,
    state: Option<&State>,
    secret: Option<&[u8]>,
) -> Result<Limiter, String> {
    let builder = match secret {
        Some(s) => builder.key_secret(s),
        None => builder,
    };
    let Some(state) = state else {
        return builder.build().map_err(|e| e.to_string());
    };
    if secret.is_none() {
        return Err(format!(
            "--state needs a stable key secret in {SECRET_ENV} (a snapshot can only be restored \
             under the secret it was taken with)"
        ));
    }
    let path = state.path.display();
    let file = match std::fs::File::open(&state.path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!(state = %path, "no snapshot yet: starting with full buckets");
            return builder.build().map_err(|e| e.to_string());
        }
        Err(e) => return Err(format!("{path}: {e}")),
    };
    match builder.restore(file) {
        Ok((limiter, s)) => {
            tracing::info!(
                state = %path, restored = s.restored, expired = s.expired,
                downtime_ms = s.elapsed.as_millis() as u64,
                wall_clock_went_back = s.wall_clock_went_back,
                "quotas restored"
            );
            Ok(limiter)
        }
        Err(refused) if state.start_empty_on_refusal => {
            tracing::warn!(
                state = %path, reason = %refused,
                "snapshot refused; starting with full buckets (--state-start-empty-on-refusal)"
            );
            refused.start_empty().map_err(|e| e.to_string())
        }
        Err(refused) => Err(format!(
            "{path}: {refused} (move the file away, or pass --state-start-empty-on-refusal to \
             start with full buckets)"
        )),
    }
}

/// Starts the periodic checkpoint.
pub fn checkpoint(limiter: &Arc<Limiter>, state: &State) -> Result<Checkpoint, String> {
    limiter
        .checkpoint(&state.path, state.every)
        .map_err(|e| format!("checkpoint: {e}"))
}

/// The last checkpoint of a graceful shutdown.
pub fn finish(checkpoint: Checkpoint) {
    let path = checkpoint.path().display().to_string();
    match checkpoint.finish() {
        Ok(s) => {
            tracing::info!(state = %path, identities = s.identities, bytes = s.bytes, "quotas saved")
        }
        Err(e) => tracing::error!(state = %path, error = %e, "quotas not saved"),
    }
}

/// Set on the first SIGTERM or SIGINT; a second one ends the process at once.
pub fn shutdown_flag() -> std::io::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&flag))?;
        signal_hook::flag::register(sig, Arc::clone(&flag))?;
    }
    Ok(flag)
}

/// Resolves once `flag` is set (never, without one).
pub async fn signalled(flag: Option<Arc<AtomicBool>>) {
    let Some(flag) = flag else {
        return std::future::pending().await;
    };
    while !flag.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
