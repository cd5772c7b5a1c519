//! A process's quotas kept in one snapshot file across restarts: restored on start, rewritten
//! periodically, and once more on a graceful shutdown.
//!
//! Every service that embeds the limiter and restarts (the demo gateway, `tollgate-server`, a
//! user's own) needs these three steps with the same rules, so they are written once here
//! rather than in each: a missing file is a first start, never an error; a refused one (another
//! key secret, another `identities.capacity`, a corrupt or truncated file) stops the start with
//! the reason and changes nothing, unless [`StateFile::start_empty_on_refusal`] says that losing
//! the quotas is acceptable; and no key secret is refused before anything is built (a random
//! secret per process could never be restored).

use core::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{Checkpoint, RestoreStats, SnapshotError, SnapshotStats};
use crate::limiter::{BuildError, Builder, Limiter};

/// Where and how often a limiter's snapshot is kept.
#[derive(Clone, Debug)]
pub struct StateFile {
    /// The snapshot file.
    pub path: PathBuf,
    /// How often the checkpoint rewrites it (10 s by default).
    pub every: Duration,
    /// Start with full buckets when the snapshot is refused, rather than fail.
    pub start_empty_on_refusal: bool,
}

/// How [`StateFile::open`] started the limiter.
#[derive(Debug)]
pub enum Opened {
    /// There was no file yet: full buckets.
    FirstStart,
    /// The snapshot was restored.
    Restored(RestoreStats),
    /// The snapshot was refused for this reason, and `start_empty_on_refusal` asked for full
    /// buckets.
    StartedEmpty(SnapshotError),
}

/// Why [`StateFile::open`] did not start the limiter. Nothing was changed: the file is only
/// ever read on start.
#[derive(Debug)]
#[non_exhaustive]
pub enum StateFileError {
    /// The builder has no `key_secret`.
    NoSecret,
    /// The file exists but cannot be opened.
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// The snapshot was refused (and starting empty was not asked for).
    Refused {
        /// The file.
        path: PathBuf,
        /// Why.
        cause: SnapshotError,
    },
    /// The limiter itself could not be built.
    Build(BuildError),
}

impl fmt::Display for StateFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateFileError::NoSecret => f.write_str(
                "a state file needs a stable key secret (a snapshot can only be restored under \
                 the secret it was taken with)",
            ),
            StateFileError::Open { path, error } => write!(f, "{}: {error}", path.display()),
            StateFileError::Refused { path, cause } => write!(f, "{}: {cause}", path.display()),
            StateFileError::Build(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl StateFileError {
    /// The error worded for an operator who set the state file with the flag `state`, whose
    /// key secret comes from `secret_env`, and who can accept a refusal with the flag
    /// `start_empty`: what to do about it, in the words of their command line.
    pub fn explain(&self, state: &str, secret_env: &str, start_empty: &str) -> String {
        match self {
            StateFileError::NoSecret => format!(
                "{state} needs a stable key secret in {secret_env} (a snapshot can only be \
                 restored under the secret it was taken with)"
            ),
            StateFileError::Refused { .. } => format!(
                "{self} (move the file away, or pass {start_empty} to start with full buckets)"
            ),
            _ => self.to_string(),
        }
    }
}

impl std::error::Error for StateFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StateFileError::NoSecret => None,
            StateFileError::Open { error, .. } => Some(error),
            StateFileError::Refused { cause, .. } => Some(cause),
            StateFileError::Build(e) => Some(e),
        }
    }
}

impl StateFile {
    /// The defaults for `path`: rewritten every 10 s, a refusal fails the start.
    pub fn new(path: impl Into<PathBuf>) -> StateFile {
        StateFile {
            path: path.into(),
            every: Duration::from_secs(10),
            start_empty_on_refusal: false,
        }
    }

    /// Builds the limiter from `builder` (which must have a `key_secret`): restored from the
    /// file if there is one, with full buckets if there is none.
    pub fn open(&self, builder: Builder) -> Result<(Limiter, Opened), StateFileError> {
        if builder.secret.is_none() {
            return Err(StateFileError::NoSecret);
        }
        let file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                #[cfg(feature = "metrics")]
                tracing::info!(state = %self.path.display(), "no snapshot yet: starting with full buckets");
                let limiter = builder.build().map_err(StateFileError::Build)?;
                return Ok((limiter, Opened::FirstStart));
            }
            Err(error) => {
                return Err(StateFileError::Open {
                    path: self.path.clone(),
                    error,
                })
            }
        };
        match builder.restore(file) {
            Ok((limiter, s)) => {
                #[cfg(feature = "metrics")]
                tracing::info!(
                    state = %self.path.display(), restored = s.restored, expired = s.expired,
                    downtime_ms = s.elapsed.as_millis() as u64,
                    wall_clock_went_back = s.wall_clock_went_back,
                    "quotas restored"
                );
                Ok((limiter, Opened::Restored(s)))
            }
            Err(refused) if self.start_empty_on_refusal => {
                #[cfg(feature = "metrics")]
                tracing::warn!(
                    state = %self.path.display(), reason = %refused,
                    "snapshot refused; starting with full buckets (start empty on refusal)"
                );
                let (cause, builder) = refused.into_parts();
                let limiter = builder.build().map_err(StateFileError::Build)?;
                Ok((limiter, Opened::StartedEmpty(cause)))
            }
            Err(refused) => Err(StateFileError::Refused {
                path: self.path.clone(),
                cause: refused.into_parts().0,
            }),
        }
    }

    /// [`StateFile::open`] where the state file is optional (a service run without one): with
    /// no file, the limiter is built as it is, with full buckets.
    pub fn open_optional(
        state: Option<&StateFile>,
        builder: Builder,
    ) -> Result<Limiter, StateFileError> {
        match state {
            Some(state) => state.open(builder).map(|(limiter, _)| limiter),
            None => builder.build().map_err(StateFileError::Build),
        }
    }

    /// Starts the periodic checkpoint of `limiter` to the file.
    pub fn checkpoint(&self, limiter: &Arc<Limiter>) -> io::Result<Checkpoint> {
        limiter.checkpoint(&self.path, self.every)
    }

    /// The last checkpoint of a graceful shutdown: stops `checkpoint` and writes once more.
    pub fn finish(checkpoint: Checkpoint) -> io::Result<SnapshotStats> {
        #[cfg(feature = "metrics")]
        let path = checkpoint.path().display().to_string();
        let saved = checkpoint.finish();
        #[cfg(feature = "metrics")]
        if let Ok(s) = &saved {
            tracing::info!(state = %path, identities = s.identities, bytes = s.bytes, "quotas saved");
        }
        saved
    }
}
