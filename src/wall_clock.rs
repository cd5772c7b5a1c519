//! The wall clock: what a snapshot is dated by. The limiter's own clock is monotonic and starts
//! at zero in every process, so it cannot say how long a restart took; the wall clock can, and a
//! restore trusts it only to move forward (see `snapshot/restore.rs`).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// `SystemTime::now`, or the function a test gave `Builder::wall_clock`.
#[derive(Clone, Default)]
pub(crate) struct WallClock(Option<Arc<dyn Fn() -> SystemTime + Send + Sync>>);

impl WallClock {
    pub(crate) fn new(now: impl Fn() -> SystemTime + Send + Sync + 'static) -> WallClock {
        WallClock(Some(Arc::new(now)))
    }

    /// Nanoseconds since the Unix epoch (0 for an instant before it, saturated far after it).
    pub(crate) fn unix_nanos(&self) -> u64 {
        let now = match &self.0 {
            Some(f) => f(),
            None => SystemTime::now(),
        };
        now.duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}
