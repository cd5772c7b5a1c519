//! `--state PATH` as a service runs it: the engine's [`StateFile`] (restore at start, a
//! crash-safe checkpoint every `--state-every`, a last save on shutdown), with errors worded
//! for the flags ([`crate::flags::StateFlags`]).
//!
//! A snapshot is keyed by the key secret, so `--state` needs a stable one in
//! [`KEY_SECRET_ENV`]. A refused snapshot (another secret or `identities.capacity`, a corrupt
//! or truncated file) stops the start with the reason, unless `--state-start-empty-on-refusal`
//! says losing the quotas is acceptable. A missing file is a first start, not a refusal.

use std::sync::Arc;

use tollgate::snapshot::{Checkpoint, StateFile};
use tollgate::{Builder, Limiter, KEY_SECRET_ENV};

/// Builds the limiter: restored from `state`'s file if there is one.
pub fn open(builder: Builder, state: Option<&StateFile>) -> Result<Limiter, String> {
    StateFile::open_optional(state, builder)
        .map_err(|e| e.explain("--state", KEY_SECRET_ENV, "--state-start-empty-on-refusal"))
}

/// Starts the periodic checkpoint of `limiter` to `state`'s file.
pub fn checkpoint(limiter: &Arc<Limiter>, state: &StateFile) -> Result<Checkpoint, String> {
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
