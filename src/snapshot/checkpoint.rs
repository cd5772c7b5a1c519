//! A periodic checkpoint on a background thread: [`Limiter::save`] every so often, errors
//! reported (the status, and a `tracing` warning with the `metrics` feature), never a panic.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use super::SnapshotStats;
use crate::limiter::Limiter;

/// What a checkpoint has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckpointStatus {
    /// Snapshots written.
    pub written: u64,
    /// Snapshots that failed.
    pub failed: u64,
    /// The last write's result: its figures, or its error's text.
    pub last: Option<Result<SnapshotStats, String>>,
}

/// The handle of a running checkpoint. Dropping it stops the thread (without a last write);
/// [`Checkpoint::finish`] stops it and writes once more, for a graceful shutdown.
pub struct Checkpoint {
    limiter: Arc<Limiter>,
    path: PathBuf,
    status: Arc<Mutex<CheckpointStatus>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Limiter {
    /// Saves a snapshot to `path` every `every` on a thread of its own (the first after one
    /// period), until the handle is stopped or dropped. Fails only if `every` is zero or the
    /// thread cannot be started.
    pub fn checkpoint(
        self: &Arc<Self>,
        path: impl Into<PathBuf>,
        every: Duration,
    ) -> io::Result<Checkpoint> {
        if every.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a checkpoint period must be longer than zero",
            ));
        }
        let path = path.into();
        let status = Arc::new(Mutex::new(CheckpointStatus::default()));
        let (tx, rx) = mpsc::channel::<()>();
        let thread = {
            let (limiter, path, status) = (Arc::clone(self), path.clone(), Arc::clone(&status));
            std::thread::Builder::new()
                .name("tollgate-checkpoint".into())
                .spawn(move || loop {
                    match rx.recv_timeout(every) {
                        Err(RecvTimeoutError::Timeout) => {
                            let _ = write(&limiter, &path, &status);
                        }
                        // Stopped, or the handle is gone.
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                })?
        };
        Ok(Checkpoint {
            limiter: Arc::clone(self),
            path,
            status,
            stop: Some(tx),
            thread: Some(thread),
        })
    }
}

/// One checkpoint, its outcome recorded and returned.
fn write(
    limiter: &Limiter,
    path: &Path,
    status: &Mutex<CheckpointStatus>,
) -> io::Result<SnapshotStats> {
    let result = limiter.save(path);
    #[cfg(feature = "metrics")]
    match &result {
        Ok(s) => tracing::debug!(
            path = %path.display(), identities = s.identities, bytes = s.bytes,
            "tollgate checkpoint written"
        ),
        Err(e) => tracing::warn!(
            path = %path.display(), error = %e,
            "tollgate checkpoint failed; the previous one is kept"
        ),
    }
    let mut s = status.lock();
    match &result {
        Ok(stats) => {
            s.written += 1;
            s.last = Some(Ok(*stats));
        }
        Err(e) => {
            s.failed += 1;
            s.last = Some(Err(e.to_string()));
        }
    }
    result
}

impl Checkpoint {
    /// What it has done so far.
    pub fn status(&self) -> CheckpointStatus {
        self.status.lock().clone()
    }

    /// The file it writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops the thread (waiting for a write in progress to end) without writing again.
    pub fn stop(mut self) {
        self.halt();
    }

    /// Stops the thread, then writes one last snapshot and returns its result: the graceful
    /// shutdown (SIGTERM) path.
    pub fn finish(mut self) -> io::Result<SnapshotStats> {
        self.halt();
        write(&self.limiter, &self.path, &self.status)
    }

    fn halt(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            // The thread catches nothing and panics on nothing; a join error would be a bug
            // in `save`, reported rather than propagated into a destructor.
            if t.join().is_err() {
                #[cfg(feature = "metrics")]
                tracing::error!("tollgate checkpoint thread panicked");
            }
        }
    }
}

impl Drop for Checkpoint {
    fn drop(&mut self) {
        self.halt();
    }
}

impl core::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("path", &self.path)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}
