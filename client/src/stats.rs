//! Client counters: kept in plain atomics (readable without a metrics recorder, by tests and the
//! storm example) and mirrored to the `metrics` facade under `tollgate_client_*`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::give_up::GiveUp;
use super::saturating_nanos as nanos;

/// Live counters of one client; share it with `Arc` and read it with [`ClientStats::snapshot`].
///
/// Each update is mirrored to the `metrics` facade (a no-op without a recorder):
///
/// | metric | kind | meaning |
/// | --- | --- | --- |
/// | `tollgate_client_requests_total` | counter | logical requests started |
/// | `tollgate_client_attempts_total` | counter | attempts sent (first tries and retries) |
/// | `tollgate_client_amplification` | histogram | attempts per finished logical request |
/// | `tollgate_client_success_total` | counter | logical requests that eventually succeeded |
/// | `tollgate_client_abandoned_total{reason}` | counter | gave up: `deadline`, `budget`, `attempts`, `non_retryable`, `wait_too_long` |
/// | `tollgate_client_wait_seconds` | histogram | each wait between attempts |
/// | `tollgate_client_retry_after_seconds` | histogram | each valid `Retry-After` received |
/// | `tollgate_client_retry_after_invalid_total` | counter | `Retry-After` values that did not parse |
///
/// Every counter is an independent `Relaxed` atomic: a snapshot taken while requests run may mix
/// moments, which is fine for monitoring and exact once the requests are done.
#[derive(Debug, Default)]
pub struct ClientStats {
    requests: AtomicU64,
    attempts: AtomicU64,
    successes: AtomicU64,
    abandoned: [AtomicU64; 5],
    wait_nanos: AtomicU64,
    waits: AtomicU64,
    retry_after_seen: AtomicU64,
    retry_after_nanos: AtomicU64,
    retry_after_invalid: AtomicU64,
}

/// A plain copy of [`ClientStats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStatsSnapshot {
    /// Logical requests started.
    pub requests: u64,
    /// Attempts sent, first tries included.
    pub attempts: u64,
    /// Logical requests that ended in success.
    pub successes: u64,
    /// Given up because the next wait would pass the deadline.
    pub abandoned_deadline: u64,
    /// Given up because the shared retry budget was empty.
    pub abandoned_budget: u64,
    /// Given up after the last allowed attempt.
    pub abandoned_attempts: u64,
    /// Given up because the outcome may not be retried (status, method, error kind).
    pub abandoned_non_retryable: u64,
    /// Given up because the next wait exceeded the per-call maximum wait.
    pub abandoned_wait_too_long: u64,
    /// Total time slept between attempts.
    pub wait_total: Duration,
    /// Number of sleeps between attempts.
    pub waits: u64,
    /// Valid `Retry-After` values received.
    pub retry_after_seen: u64,
    /// Sum of the valid `Retry-After` values received.
    pub retry_after_total: Duration,
    /// `Retry-After` values that did not parse (the backoff was used instead).
    pub retry_after_invalid: u64,
}

impl ClientStatsSnapshot {
    /// Attempts per logical request (1.0 = no retries); 0 when nothing ran.
    pub fn amplification(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.attempts as f64 / self.requests as f64
        }
    }

    /// All abandonments, whatever the reason.
    pub fn abandoned(&self) -> u64 {
        self.abandoned_deadline
            + self.abandoned_budget
            + self.abandoned_attempts
            + self.abandoned_non_retryable
            + self.abandoned_wait_too_long
    }
}

impl ClientStats {
    /// Fresh zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> ClientStatsSnapshot {
        let a = |i: usize| self.abandoned[i].load(Relaxed);
        ClientStatsSnapshot {
            requests: self.requests.load(Relaxed),
            attempts: self.attempts.load(Relaxed),
            successes: self.successes.load(Relaxed),
            abandoned_deadline: a(0),
            abandoned_budget: a(1),
            abandoned_attempts: a(2),
            abandoned_non_retryable: a(3),
            abandoned_wait_too_long: a(4),
            wait_total: Duration::from_nanos(self.wait_nanos.load(Relaxed)),
            waits: self.waits.load(Relaxed),
            retry_after_seen: self.retry_after_seen.load(Relaxed),
            retry_after_total: Duration::from_nanos(self.retry_after_nanos.load(Relaxed)),
            retry_after_invalid: self.retry_after_invalid.load(Relaxed),
        }
    }

    pub(crate) fn request(&self) {
        self.requests.fetch_add(1, Relaxed);
        metrics::counter!("tollgate_client_requests_total").increment(1);
    }

    pub(crate) fn attempt(&self) {
        self.attempts.fetch_add(1, Relaxed);
        metrics::counter!("tollgate_client_attempts_total").increment(1);
    }

    pub(crate) fn wait(&self, d: Duration) {
        self.wait_nanos.fetch_add(nanos(d), Relaxed);
        self.waits.fetch_add(1, Relaxed);
        metrics::histogram!("tollgate_client_wait_seconds").record(d.as_secs_f64());
    }

    pub(crate) fn retry_after(&self, parsed: Option<Duration>) {
        match parsed {
            Some(d) => {
                self.retry_after_seen.fetch_add(1, Relaxed);
                self.retry_after_nanos.fetch_add(nanos(d), Relaxed);
                metrics::histogram!("tollgate_client_retry_after_seconds").record(d.as_secs_f64());
            }
            None => {
                self.retry_after_invalid.fetch_add(1, Relaxed);
                metrics::counter!("tollgate_client_retry_after_invalid_total").increment(1);
            }
        }
    }

    /// The end of one logical request: success (`None`) or why it was abandoned.
    pub(crate) fn finish(&self, attempts: u32, gave_up: Option<&GiveUp>) {
        metrics::histogram!("tollgate_client_amplification").record(f64::from(attempts));
        match gave_up {
            None => {
                self.successes.fetch_add(1, Relaxed);
                metrics::counter!("tollgate_client_success_total").increment(1);
            }
            Some(reason) => {
                let i = match reason {
                    GiveUp::Deadline { .. } => 0,
                    GiveUp::Budget => 1,
                    GiveUp::Attempts => 2,
                    GiveUp::NonRetryable => 3,
                    GiveUp::WaitTooLong { .. } => 4,
                };
                self.abandoned[i].fetch_add(1, Relaxed);
                metrics::counter!("tollgate_client_abandoned_total", "reason" => reason.as_str())
                    .increment(1);
            }
        }
    }
}
