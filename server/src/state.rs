//! `--state PATH`: quotas that survive a restart, as the demo gateway keeps them (its
//! `examples/gateway/state.rs`; the same rules, without its signal handling: the server's own
//! graceful shutdown calls [`finish`]). The embedded limiter only: with `--redis` the state
//! lives in Redis and `--state` is refused.
//!
//! The limiter is restored from the snapshot at PATH on start, checkpointed every
//! `--state-every` (crash-safe: a temporary file, fsync, rename), and once more on SIGTERM or
//! ctrl-c after the requests in flight. A snapshot is keyed by the key secret, so `--state`
//! needs a stable one in [`SECRET_ENV`]. A snapshot that is refused (another secret, another
//! `identities.capacity`, a corrupt or truncated file) stops the server with the reason,
//! unless `--state-start-empty-on-refusal` says losing the quotas is acceptable. A missing
//! file is a first start, not a refusal.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tollgate::snapshot::Checkpoint;
use tollgate::{Builder, Limiter};

/// The environment variable the key secret is read from.
pub const SECRET_ENV: &str = "TOLLGATE_KEY_SECRET";

/// The `--state*` flags.
#[derive(Clone, Debug)]
pub struct State {
    /// The snapshot file.
    pub path: PathBuf,
    /// How often it is rewritten (`--state-every`, seconds; 10 by default).
    pub every: Duration,
    /// Start with full buckets when the snapshot is refused, rather than stop.
    pub start_empty_on_refusal: bool,
}

impl State {
    /// The defaults for `path`: every 10 s, a refusal stops the server.
    pub fn new(path: PathBuf) -> State {
        State {
            path,
            every: Duration::from_secs(10),
            start_empty_on_refusal: false,
        }
    }
}

/// Builds the limiter, with `secret` as its key secret: restored from `state`'s file if there
/// is one. `--state` without a secret is refused (a snapshot is only restored under its own).
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

/// Starts the periodic checkpoint of `limiter` to `state`'s file.
pub fn checkpoint(limiter: &Arc<Limiter>, state: &State) -> Result<Checkpoint, String> {
    limiter
        .checkpoint(&state.path, state.every)
        .map_err(|e| format!("checkpoint: {e}"))
}

/// The last checkpoint of a graceful shutdown, logged.
pub fn finish(checkpoint: Checkpoint) -> Result<(), String> {
    let path = checkpoint.path().display().to_string();
    match checkpoint.finish() {
        Ok(s) => {
            tracing::info!(state = %path, identities = s.identities, bytes = s.bytes, "quotas saved");
            Ok(())
        }
        Err(e) => Err(format!("{path}: quotas not saved: {e}")),
    }
}
