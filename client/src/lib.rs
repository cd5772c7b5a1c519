//! The client SDK: makes callers of a rate-limited API well behaved.
//!
//! - [`parse_retry_after`] reads both `Retry-After` forms (seconds and the three HTTP-date forms);
//!   [`parse_retry_after_dated`] measures a date from the response's own `Date`, so clock skew cancels.
//! - [`Backoff`] / [`Jitter`]: capped exponential backoff with full, equal or decorrelated jitter.
//! - [`RetryPolicy`] + [`execute`]: one logical request, one deadline over all attempts and
//!   waits, an attempt limit, Retry-After first with jitter only on top, and an immediate stop
//!   ([`GiveUp::Deadline`], [`GiveUp::WaitTooLong`]) carrying the wait when it cannot be honoured.
//! - [`RetryBudget`]: retries shared by all tasks of a client, at most a ratio of the requests.
//! - [`Classifier`] and the idempotency rules: what may be repeated without duplicating effects.
//! - [`RetryLayer`]: the same loop as a tower layer for `http::Request<B: Clone>`.
//! - [`ClientStats`] and `tollgate_client_*` metrics: amplification, eventual success,
//!   abandonment by reason, time spent waiting.
//! - [`PRODUCT_TOKEN`] (`tollgate-client/VERSION`) in `User-Agent`: [`RetryLayer`] appends it
//!   to the caller's own by default; with [`execute`], [`add_product_token`] does it.
//!
//! Time ([`Clock`]) and randomness (`fastrand::Rng`) are injected so that tests run on
//! [`ManualClock`] without sleeping, and [`SkewedClock`] puts a client's wall clock off by a
//! fixed amount (what an HTTP-date `Retry-After` then means to it).
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use http::{Method, Response};
//! use tollgate_client::{execute, Call, GiveUp, ManualClock, RetryBudget, RetryPolicy, TransportError};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let clock = Arc::new(ManualClock::default()); // `TokioClock` (the default) in production
//! let policy = RetryPolicy::new()
//!     .deadline(Some(Duration::from_secs(10)))
//!     .max_wait(Duration::from_secs(5))
//!     .clock(clock.clone());
//! // One budget per client, shared by all its tasks.
//! let budget = RetryBudget::with_clock(Duration::from_secs(10), 10, 0.2, clock.clone());
//!
//! let result = execute(
//!     &policy,
//!     &budget,
//!     Call::new(Method::POST).generate_idempotency_key(),
//!     |attempt| async move {
//!         // Send the request here with `attempt.idempotency_key` and `attempt.timeout`;
//!         // map a connect error to `TransportError::not_sent(e)`.
//!         let status = if attempt.number < 3 { 503 } else { 201 };
//!         let resp = Response::builder().status(status).header("retry-after", "1").body(());
//!         resp.map_err(TransportError::not_sent)
//!     },
//! )
//! .await;
//! match result {
//!     Ok(resp) => assert_eq!(resp.status(), 201),
//!     Err(e) => match e.reason {
//!         // Too long to wait here: park the work and try again after `wait`.
//!         GiveUp::Deadline { wait } | GiveUp::WaitTooLong { wait } => println!("park for {wait:?}"),
//!         _ => panic!("{e}"),
//!     },
//! }
//! assert_eq!(policy.client_stats().snapshot().attempts, 3);
//! # });
//! ```

mod backoff;
mod budget;
mod call;
mod classify;
mod clock;
mod execute;
mod give_up;
mod layer;
mod policy;
mod retry_after;
mod stats;
mod user_agent;

pub use backoff::{Backoff, Delays, Jitter};
pub use budget::RetryBudget;
pub use call::{new_idempotency_key, Attempt, Call, IdempotencyKey};
pub use classify::{
    is_idempotent, send_state_from_io, Classification, Classifier, ResponseMeta, SendState,
    TransportError,
};
pub use clock::{Clock, ManualClock, SkewedClock, Sleep, TokioClock};
pub use execute::execute;
pub use give_up::{GiveUp, Last, RetryError};
pub use layer::{IoSendState, RetryFuture, RetryLayer, RetryService, SendStateOf, IDEMPOTENCY_KEY};
pub use policy::RetryPolicy;
pub use retry_after::{parse_retry_after, parse_retry_after_dated, MAX_RETRY_AFTER};
pub use stats::{ClientStats, ClientStatsSnapshot};
pub use user_agent::{add_product_token, user_agent, PRODUCT_TOKEN};

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
