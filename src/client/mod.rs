//! The client SDK: makes callers of a rate-limited API well behaved.
//!
//! - [`parse_retry_after`] reads both `Retry-After` forms (seconds and the three HTTP-date forms).
//! - [`Backoff`] / [`Jitter`]: capped exponential backoff with full, equal or decorrelated jitter.
//! - [`RetryPolicy`] + [`execute`]: one logical request, one deadline over all attempts and
//!   waits, an attempt limit, Retry-After first with jitter only on top, and an immediate stop
//!   ([`GiveUp::Deadline`], [`GiveUp::WaitTooLong`]) carrying the wait when it cannot be honoured.
//! - [`RetryBudget`]: retries shared by all tasks of a client, at most a ratio of the requests.
//! - [`Classifier`] and the idempotency rules: what may be repeated without duplicating effects.
//! - [`RetryLayer`]: the same loop as a tower layer for `http::Request<B: Clone>`.
//! - [`ClientStats`] and `tollgate_client_*` metrics: amplification, eventual success,
//!   abandonment by reason, time spent waiting.
//!
//! Time ([`Clock`]) and randomness (`fastrand::Rng`) are injected so that tests run on
//! [`ManualClock`] without sleeping.

mod backoff;
mod budget;
mod classify;
mod clock;
mod layer;
mod policy;
mod retry_after;
mod stats;

pub use backoff::{Backoff, Delays, Jitter};
pub use budget::RetryBudget;
pub use classify::{
    is_idempotent, send_state_from_io, Classifier, ResponseMeta, SendState, TransportError, Verdict,
};
pub use clock::{Clock, ManualClock, Sleep, TokioClock};
pub use layer::{
    IoSendState, ResponseFuture, RetryLayer, RetryService, SendStateOf, IDEMPOTENCY_KEY,
};
pub use policy::{
    execute, new_idempotency_key, Attempt, Call, GiveUp, IdempotencyKey, Last, RetryError,
    RetryPolicy,
};
pub use retry_after::{parse_retry_after, MAX_RETRY_AFTER};
pub use stats::{ClientStats, ClientStatsSnapshot};

/// The random generator of [`RetryPolicy::rng`] and [`Backoff::delay`], re-exported so callers
/// can seed it without naming the dependency.
pub use fastrand;

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// `d` in nanoseconds, saturating at `u64::MAX` (584 years): every wait here is far below.
fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Locks `m`, ignoring poisoning: the guarded data (counters, a generator, a clock offset) stays
/// valid if a holder panicked, and a retry loop should not panic because a test did.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
