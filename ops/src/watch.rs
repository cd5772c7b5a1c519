//! Reloading a profile without a restart: on `SIGHUP`, and when the file's modification time
//! changes (looked at every second). The caller's `reload` does the reload and reports it; a
//! bad edit is its to log, and the old profile stays in force.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{signal, SignalKind};

/// How often the profile file's modification time is looked at.
pub const POLL: Duration = Duration::from_secs(1);

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Calls `reload(why)` on `SIGHUP` (`why` = "SIGHUP") and when `path` changes ("file
/// changed"), until the task is dropped. Without a `SIGHUP` handler (warned), on changes only.
pub async fn watch(path: PathBuf, mut reload: impl FnMut(&str)) {
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "no SIGHUP handler; reloading on file change only");
            None
        }
    };
    let mut seen = mtime(&path);
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let signalled = async {
            match hup.as_mut() {
                Some(h) => h.recv().await,
                None => std::future::pending().await,
            }
        };
        let why = tokio::select! {
            Some(()) = signalled => "SIGHUP",
            _ = tick.tick() => {
                let now = mtime(&path);
                if now == seen {
                    continue;
                }
                seen = now;
                "file changed"
            }
        };
        reload(why);
    }
}
