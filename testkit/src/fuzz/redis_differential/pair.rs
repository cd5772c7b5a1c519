//! The two backends side by side: the Redis limiter, the embedded one on a mock clock, and that
//! clock moved to the instants the server reports, so that both decide at the same time.

use std::cell::Cell;
use std::sync::Arc;

use tollgate::quanta::Mock;
use tollgate::redis::RedisLimiter;
use tollgate::{Key, Limiter, RouteClass};

use crate::redis_server::time_micros_at;

/// Both backends, the embedded one's mock clock, and where that clock stands.
pub(super) struct Pair {
    /// One limiter per program of the harness, taken in turn.
    pub(super) limiters: Vec<RedisLimiter>,
    pub(super) turn: Cell<usize>,
    pub(super) embedded: Limiter,
    pub(super) mock: Arc<Mock>,
    pub(super) port: u16,
    /// The server time (us) that is the embedded clock's zero: a whole second.
    pub(super) zero: u64,
    /// The embedded clock, microseconds after `zero`.
    pub(super) at: u64,
    pub(super) classes: [RouteClass; 2],
    /// Capacity window (us), if any.
    pub(super) window: Option<u64>,
}

/// Why an input stops early without a verdict.
pub(super) struct Stop;

impl Pair {
    /// The server's clock, us since the Unix epoch.
    pub(super) fn server_time(&self) -> u64 {
        time_micros_at(self.port)
    }

    /// Moves the embedded clock to server time `t`; `Stop` if that is behind it (the server's
    /// clock stepped back: the two can no longer be compared).
    pub(super) fn set(&mut self, t: u64) -> Result<(), Stop> {
        let rel = t.checked_sub(self.zero).ok_or(Stop)?;
        if rel < self.at {
            return Err(Stop);
        }
        self.mock.increment((rel - self.at) * 1_000);
        self.at = rel;
        Ok(())
    }

    /// The embedded clock at `t` (us after zero), backwards too: only for peeks.
    pub(super) fn seek(&mut self, rel: u64) {
        if rel >= self.at {
            self.mock.increment((rel - self.at) * 1_000);
        } else {
            self.mock.decrement((self.at - rel) * 1_000);
        }
        self.at = rel;
    }

    /// The Redis limiter of the next call (the module's and the function's in turn, if both).
    pub(super) fn redis(&self) -> &RedisLimiter {
        let t = self.turn.get();
        self.turn.set(t + 1);
        &self.limiters[t % self.limiters.len()]
    }

    pub(super) fn key<'a>(&self, name: &'a str, c: usize) -> Key<'a> {
        Key::authenticated("acme", name, self.classes[c]).unwrap()
    }
}
