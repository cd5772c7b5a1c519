//! Reloading the profile without a restart (`tollgate_ops::watch`: on SIGHUP, and when the
//! file's modification time changes), limits and descriptor rules together. A bad edit is
//! logged and counted, and the old profile stays in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::Backend;
use crate::decide::RateLimiter;
use crate::metrics as m;

/// Reloads `limiter` from `path` on SIGHUP and on file change, until the task is dropped.
pub async fn watch<B: Backend>(limiter: Arc<RateLimiter<B>>, path: PathBuf) {
    let file = path.clone();
    tollgate_ops::watch::watch(path, |why| reload(&limiter, &file, why)).await
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
