//! Reloading the profile without a restart, as the demo gateway does (its watcher is an
//! example's private code; this is the async form of the same rule): on SIGHUP, and when the
//! file's modification time changes (polled every second). A bad edit is logged and counted,
//! and the old profile stays in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{signal, SignalKind};

use crate::backend::Backend;
use crate::decide::RateLimiter;
use crate::metrics as m;

/// How often the profile file's modification time is looked at.
pub const POLL: Duration = Duration::from_secs(1);

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Reloads `limiter` from `path` on SIGHUP and on file change, until the task is dropped.
pub async fn watch<B: Backend>(limiter: Arc<RateLimiter<B>>, path: PathBuf) {
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
        let why = tokio::select! {
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => "SIGHUP",
            _ = tick.tick() => {
                let now = mtime(&path);
                if now == seen {
                    continue;
                }
                seen = now;
                "file changed"
            }
        };
        reload(&limiter, &path, why);
    }
}

/// One reload, logged and counted.
pub fn reload<B: Backend>(limiter: &RateLimiter<B>, path: &Path, why: &str) {
    match limiter.reload_from(path) {
        Ok(()) => {
            m::reload(true);
            tracing::info!(profile = %path.display(), why, "profile reloaded");
        }
        Err(e) => {
            m::reload(false);
            tracing::warn!(profile = %path.display(), why, error = %e, "profile not reloaded; the old one stays in force");
        }
    }
}
