//! `--state PATH`: quotas that survive a restart, through the engine's [`StateFile`] as the
//! demo gateway keeps them (the same rules, without its signal handling: the server's own
//! graceful shutdown calls [`finish`]); this file only words its errors for the flags. The embedded limiter only: with `--redis` the state
//! lives in Redis and `--state` is refused.
//!
//! The limiter is restored from the snapshot at PATH on start, checkpointed every
//! `--state-every` (crash-safe: a temporary file, fsync, rename), and once more on SIGTERM or
//! ctrl-c after the requests in flight. A snapshot is keyed by the key secret, so `--state`
//! needs a stable one in [`KEY_SECRET_ENV`]. A snapshot that is refused (another secret, another
//! `identities.capacity`, a corrupt or truncated file) stops the server with the reason,
//! unless `--state-start-empty-on-refusal` says losing the quotas is acceptable. A missing
//! file is a first start, not a refusal.

use std::sync::Arc;

use tollgate::snapshot::{Checkpoint, StateFile};
use tollgate::{Builder, Limiter, KEY_SECRET_ENV};

/// The `--state*` flags: the engine's [`StateFile`] (path, `--state-every`, 10 s by default,
/// and `--state-start-empty-on-refusal`), which holds the rules above for the demo gateway too.
pub type State = StateFile;

/// Builds the limiter: restored from `state`'s file if there is one, with errors worded for
/// the server's flags. `--state` without a key secret is refused (a snapshot is only restored
/// under its own).
pub fn open(builder: Builder, state: Option<&State>) -> Result<Limiter, String> {
    StateFile::open_optional(state, builder)
        .map_err(|e| e.explain("--state", KEY_SECRET_ENV, "--state-start-empty-on-refusal"))
}

/// Starts the periodic checkpoint of `limiter` to `state`'s file.
pub fn checkpoint(limiter: &Arc<Limiter>, state: &State) -> Result<Checkpoint, String> {
    state
        .checkpoint(limiter)
        .map_err(|e| format!("checkpoint: {e}"))
}

/// The last checkpoint of a graceful shutdown (logged by the engine when saved).
pub fn finish(checkpoint: Checkpoint) -> Result<(), String> {
    let path = checkpoint.path().display().to_string();
    StateFile::finish(checkpoint)
        .map(|_| ())
        .map_err(|e| format!("{path}: quotas not saved: {e}"))
}
