//! The coarse clock, an opt-in ([`Builder::coarse_clock`](super::Builder::coarse_clock)): a
//! thread of the limiter's own reads the clock every `interval` and stores the time, and every
//! decision reads that stored time (one load) instead of the TSC, the largest single part of a
//! hot admit (`benches/README.md`).
//!
//! What it costs: the time a decision sees lags the real time by up to one interval (more if
//! the thread is not scheduled on time). A refusal's `Retry-After` is then up to one interval
//! longer than it needs to be, and a caller who waits exactly that long may still be refused
//! once, for up to one interval; a bucket may admit up to one interval's worth of its rate
//! beyond its limit over any span (the clock can catch up by the lag); shared-capacity windows
//! turn over up to one interval late. The default clock is exact.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sync::unmodelled::{AtomicU64, Ordering};

/// The shortest and the longest interval [`CoarseClock::start`] accepts: shorter would keep a
/// core busy for nothing, longer would make `Retry-After` visibly wrong.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_micros(100);
pub(crate) const MAX_INTERVAL: Duration = Duration::from_millis(100);

/// The stored time and the thread that keeps it; dropping it stops and joins the thread.
pub(crate) struct CoarseClock {
    now: Arc<AtomicU64>,
    /// Dropped first on drop: the thread sees the channel closed and returns.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl CoarseClock {
    /// Starts the thread, storing `read()` now and then every `interval`. `read` is the
    /// limiter's exact clock (nanoseconds since its epoch), so both clocks agree at every tick.
    pub(crate) fn start(
        interval: Duration,
        read: impl Fn() -> u64 + Send + 'static,
    ) -> std::io::Result<CoarseClock> {
        let now = Arc::new(AtomicU64::new(read()));
        let (stop, stopped) = mpsc::channel::<()>();
        let theirs = Arc::clone(&now);
        let thread = std::thread::Builder::new()
            .name("tollgate-coarse-clock".into())
            .spawn(move || loop {
                match stopped.recv_timeout(interval) {
                    // Relaxed: the time is the whole state, nothing is published with it, and
                    // each reader sees the stored times in order (one location's coherence),
                    // so its clock never goes back.
                    Err(RecvTimeoutError::Timeout) => theirs.store(read(), Ordering::Relaxed),
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
            })?;
        Ok(CoarseClock {
            now,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The time of the last tick.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        // Relaxed: see the store. A reader that sees an older tick than another thread decides
        // as if its request had come a little earlier, as with two reads of an exact clock.
        self.now.load(Ordering::Relaxed)
    }
}

impl Drop for CoarseClock {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            // The thread only sleeps and stores: it cannot panic, and a join error would say
            // nothing the limiter could act on.
            let _ = t.join();
        }
    }
}
