//! Time as the retry loop sees it: a monotonic `now`, a wall clock for HTTP-dates, and `sleep`.
//!
//! Injected so tests move time instead of waiting for it ([`ManualClock`]), and so one runtime
//! ([`TokioClock`]) is not baked into the retry logic.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use super::lock;

/// A boxed, `Send` sleep future, so [`Clock`] stays object-safe (`Arc<dyn Clock>`).
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The time source and sleeper of the retry loop and the retry budget.
pub trait Clock: Send + Sync + 'static {
    /// Monotonic now: deadlines and budget windows are measured on it.
    fn now(&self) -> Instant;
    /// Wall-clock now: only to turn a `Retry-After` HTTP-date into a wait.
    fn wall(&self) -> SystemTime;
    /// A future that completes after `d`.
    fn sleep(&self, d: Duration) -> Sleep;
}

/// The production clock: tokio's timer (so `tokio::time::pause` also drives it) and the system
/// wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep(&self, d: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(d))
    }
}

/// A clock whose wall time is off by a fixed amount, on top of another clock whose monotonic
/// time and sleeps it keeps.
///
/// For testing what a client with a wrong wall clock does with a `Retry-After` HTTP-date (only
/// [`Clock::wall`] is skewed; deadlines, budgets and waits stay on the inner monotonic clock):
/// `RetryPolicy::new().clock(Arc::new(SkewedClock::ahead(TokioClock, Duration::from_secs(30))))`.
#[derive(Clone, Copy, Debug)]
pub struct SkewedClock<C> {
    inner: C,
    ahead: bool,
    by: Duration,
}

impl<C: Clock> SkewedClock<C> {
    /// Wall time `by` later than `inner`'s (a client clock running fast).
    pub fn ahead(inner: C, by: Duration) -> Self {
        SkewedClock {
            inner,
            ahead: true,
            by,
        }
    }

    /// Wall time `by` earlier than `inner`'s (a client clock running slow).
    pub fn behind(inner: C, by: Duration) -> Self {
        SkewedClock {
            inner,
            ahead: false,
            by,
        }
    }

    /// Skewed by `seconds`: ahead when positive, behind when negative.
    pub fn by_seconds(inner: C, seconds: i64) -> Self {
        let by = Duration::from_secs(seconds.unsigned_abs());
        if seconds >= 0 {
            SkewedClock::ahead(inner, by)
        } else {
            SkewedClock::behind(inner, by)
        }
    }
}

impl<C: Clock> Clock for SkewedClock<C> {
    fn now(&self) -> Instant {
        self.inner.now()
    }

    /// The inner wall time moved by the skew (saturating at the epoch and at the far future,
    /// where `SystemTime` cannot go).
    fn wall(&self) -> SystemTime {
        let w = self.inner.wall();
        let moved = if self.ahead {
            w.checked_add(self.by)
        } else {
            w.checked_sub(self.by)
        };
        moved.unwrap_or(if self.ahead {
            w
        } else {
            SystemTime::UNIX_EPOCH
        })
    }

    fn sleep(&self, d: Duration) -> Sleep {
        self.inner.sleep(d)
    }
}

#[derive(Debug)]
struct ManualState {
    elapsed: Duration,
    sleeps: Vec<Duration>,
}

/// A clock for tests: time moves only when told, and `sleep(d)` moves it by `d` at once.
///
/// Sleeping completes immediately after advancing both clocks, so a retry loop that would wait
/// minutes runs in microseconds, and every requested sleep is logged for assertions. A sleep raced
/// against a pending future (an attempt timeout) fires as soon as the other side is pending, as if
/// nothing else happened in the meantime, which is what tokio's paused time does too.
/// Clones share the same time.
#[derive(Clone, Debug)]
pub struct ManualClock {
    origin: Instant,
    wall_origin: SystemTime,
    state: Arc<Mutex<ManualState>>,
}

impl ManualClock {
    /// A clock whose wall time starts at `wall`.
    pub fn new(wall: SystemTime) -> Self {
        ManualClock {
            origin: Instant::now(),
            wall_origin: wall,
            state: Arc::new(Mutex::new(ManualState {
                elapsed: Duration::ZERO,
                sleeps: Vec::new(),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, ManualState> {
        lock(&self.state)
    }

    /// Moves both clocks forward by `d` (without logging a sleep).
    pub fn advance(&self, d: Duration) {
        self.state().elapsed += d;
    }

    /// Time elapsed since the clock was made.
    pub fn elapsed(&self) -> Duration {
        self.state().elapsed
    }

    /// Every sleep that ran so far, in order: waits between attempts and attempt timers that
    /// fired (a timer that lost its race never ran).
    pub fn sleeps(&self) -> Vec<Duration> {
        self.state().sleeps.clone()
    }
}

impl Default for ManualClock {
    /// Wall time starts at the Unix epoch plus ~56 years (2026-01-01T00:00:00Z), a fixed point.
    fn default() -> Self {
        ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.origin + self.elapsed()
    }

    fn wall(&self) -> SystemTime {
        self.wall_origin + self.elapsed()
    }

    fn sleep(&self, d: Duration) -> Sleep {
        let state = Arc::clone(&self.state);
        // Time moves on the first poll, not here: a timer raced against an attempt that is
        // already done is never polled and must not move the clock.
        Box::pin(async move {
            let mut s = lock(&state);
            s.elapsed += d;
            s.sleeps.push(d);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_moves_only_the_wall_clock() {
        let base = ManualClock::default();
        let ahead = SkewedClock::by_seconds(base.clone(), 30);
        let behind = SkewedClock::by_seconds(base.clone(), -30);
        assert_eq!(ahead.wall(), base.wall() + Duration::from_secs(30));
        assert_eq!(behind.wall(), base.wall() - Duration::from_secs(30));
        assert_eq!(ahead.now(), base.now());
        // Sleeping on the skewed clock moves the inner one.
        block_on(behind.sleep(Duration::from_secs(2)));
        assert_eq!(base.elapsed(), Duration::from_secs(2));
        assert_eq!(behind.wall(), base.wall() - Duration::from_secs(30));
        // Behind the epoch saturates at the epoch.
        let early = SkewedClock::behind(ManualClock::new(SystemTime::UNIX_EPOCH), Duration::MAX);
        assert_eq!(early.wall(), SystemTime::UNIX_EPOCH);
    }

    /// Polls a future that completes on its first poll (a `ManualClock` sleep).
    fn block_on(f: Sleep) {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f);
    }
}
