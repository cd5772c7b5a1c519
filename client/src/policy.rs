//! [`RetryPolicy`]: how one logical request is retried (attempts, deadline, waits,
//! classification) and the clock, randomness and counters it runs on.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::backoff::Backoff;
use super::classify::Classifier;
use super::clock::{Clock, TokioClock};
use super::saturating_nanos;
use super::stats::ClientStats;

/// How one logical request is retried: attempts, deadline, waits, classification, and the
/// injected clock, randomness and counters.
///
/// Clones share the clock, the random generator and the [`ClientStats`], so one policy (or its
/// clones) per client gives one set of counters.
#[derive(Clone)]
pub struct RetryPolicy {
    pub(crate) max_attempts: u32,
    pub(crate) deadline: Option<Duration>,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) max_wait: Duration,
    pub(crate) backoff: Backoff,
    pub(crate) retry_after_jitter: f64,
    pub(crate) retry_after_spread: Duration,
    pub(crate) classifier: Classifier,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rng: Arc<Mutex<fastrand::Rng>>,
    pub(crate) stats: Arc<ClientStats>,
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &self.max_attempts)
            .field("deadline", &self.deadline)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("max_wait", &self.max_wait)
            .field("backoff", &self.backoff)
            .field("retry_after_jitter", &self.retry_after_jitter)
            .field("retry_after_spread", &self.retry_after_spread)
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl Default for RetryPolicy {
    /// 4 attempts, 30 s deadline, 10 s per attempt, 60 s longest single wait, the default
    /// [`Backoff`] and [`Classifier`], Retry-After jitter of 10 % or at least 1 s, tokio's clock,
    /// an entropy-seeded generator, fresh stats.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            deadline: Some(Duration::from_secs(30)),
            attempt_timeout: Some(Duration::from_secs(10)),
            max_wait: Duration::from_secs(60),
            backoff: Backoff::default(),
            retry_after_jitter: 0.1,
            retry_after_spread: Duration::from_secs(1),
            classifier: Classifier::default(),
            clock: Arc::new(TokioClock),
            rng: Arc::new(Mutex::new(fastrand::Rng::new())),
            stats: Arc::new(ClientStats::new()),
        }
    }
}

impl RetryPolicy {
    /// The defaults; see [`RetryPolicy::default`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Attempts per logical request, first try included (at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// One deadline for all attempts and waits of a logical request, or `None` for no deadline.
    pub fn deadline(mut self, d: Option<Duration>) -> Self {
        self.deadline = d;
        self
    }

    /// Each attempt's own timeout (further shortened to the time left), or `None`.
    pub fn attempt_timeout(mut self, d: Option<Duration>) -> Self {
        self.attempt_timeout = d;
        self
    }

    /// The longest single wait this call accepts; a longer one (usually a server's Retry-After)
    /// ends the call at once with [`GiveUp::WaitTooLong`](crate::GiveUp::WaitTooLong) so the work can be parked.
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.max_wait = d;
        self
    }

    /// The backoff used when the server gave no (valid) Retry-After.
    pub fn backoff(mut self, b: Backoff) -> Self {
        self.backoff = b;
        self
    }

    /// Jitter added on top of a server's Retry-After `s`: uniform in
    /// `[0, max(ratio * s, at_least)]`, so clients told the same second do not wake together.
    /// The wait is never shorter than `s`; the jitter (not `s`) is cut to [`max_wait`](Self::max_wait).
    pub fn retry_after_jitter(mut self, ratio: f64, at_least: Duration) -> Self {
        self.retry_after_jitter = if ratio.is_nan() { 0.0 } else { ratio.max(0.0) };
        self.retry_after_spread = at_least;
        self
    }

    /// Which statuses are retried.
    pub fn classifier(mut self, c: Classifier) -> Self {
        self.classifier = c;
        self
    }

    /// The clock (and sleeper); tests inject [`ManualClock`](super::ManualClock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The random generator for jitter and idempotency keys; seed it for reproducible tests.
    pub fn rng(mut self, rng: fastrand::Rng) -> Self {
        self.rng = Arc::new(Mutex::new(rng));
        self
    }

    /// Where counters go; share one `Arc` between policies of one client.
    pub fn stats(mut self, stats: Arc<ClientStats>) -> Self {
        self.stats = stats;
        self
    }

    /// The counters this policy records into.
    pub fn client_stats(&self) -> &Arc<ClientStats> {
        &self.stats
    }

    /// The wait for a server's Retry-After of `server`, or `Err(server)` when it exceeds
    /// `max_wait`. Never shorter than `server`, nor than the backoff floor.
    pub(crate) fn retry_after_wait(
        &self,
        server: Duration,
        rng: &mut fastrand::Rng,
    ) -> Result<Duration, Duration> {
        if server > self.max_wait {
            return Err(server);
        }
        let spread = server
            .mul_f64(self.retry_after_jitter.min(1e6))
            .max(self.retry_after_spread);
        let spread_ns = saturating_nanos(spread);
        let extra = Duration::from_nanos(rng.u64(0..=spread_ns));
        let wait = server.saturating_add(extra).min(self.max_wait);
        Ok(wait.max(self.backoff.floor().min(self.max_wait)))
    }
}
