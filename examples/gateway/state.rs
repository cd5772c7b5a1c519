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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::snapshot::{Checkpoint, StateFile};
use tollgate::{Builder, Limiter, KEY_SECRET_ENV};

/// The `--state*` flags: the engine's [`StateFile`] (restore, checkpoint, last save), which
/// `tollgate-server` uses too.
pub type State = StateFile;

/// Builds the limiter: restored from `state`'s file if there is one, with errors worded for
/// the gateway's flags.
pub fn open(builder: Builder, state: Option<&State>) -> Result<Limiter, String> {
    StateFile::open_optional(state, builder)
        .map_err(|e| e.explain("--state", KEY_SECRET_ENV, "--state-start-empty-on-refusal"))
}

/// Starts the periodic checkpoint.
pub fn checkpoint(limiter: &Arc<Limiter>, state: &State) -> Result<Checkpoint, String> {
    state
        .checkpoint(limiter)
        .map_err(|e| format!("checkpoint: {e}"))
}

/// The last checkpoint of a graceful shutdown (logged by the engine when saved).
pub fn finish(checkpoint: Checkpoint) {
    let path = checkpoint.path().display().to_string();
    if let Err(e) = StateFile::finish(checkpoint) {
        tracing::error!(state = %path, error = %e, "quotas not saved");
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
