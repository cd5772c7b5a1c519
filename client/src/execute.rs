//! The retry loop: one logical request, many attempts, one deadline.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use super::budget::RetryBudget;
use super::call::{new_idempotency_key, Attempt, Call, IdempotencyKey};
use super::classify::{Classification, ResponseMeta, SendState, TransportError};
use super::clock::Clock;
use super::give_up::{GiveUp, Last, RetryError};
use super::lock;
use super::policy::RetryPolicy;
use super::retry_after::parse_retry_after_dated;

/// Polls `fut` against a timer of `timeout` on `clock`; `None` when the timer wins. `fut` is
/// polled first, so an attempt that is ready is never reported as timed out.
async fn with_timeout<F: Future>(
    clock: &dyn Clock,
    timeout: Option<Duration>,
    fut: F,
) -> Option<F::Output> {
    let Some(t) = timeout else {
        return Some(fut.await);
    };
    let mut fut = pin!(fut);
    let mut timer = clock.sleep(t);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// Runs one logical request: calls `op` for each attempt until success or a reason to stop.
///
/// Per attempt: classify the outcome ([`Classifier`](crate::Classifier), the method and the key
/// of `call`); on a retryable one, wait for the server's Retry-After plus jitter, or the backoff; but stop at once,
/// without sleeping, if attempts are used up, the wait is above `max_wait`
/// ([`GiveUp::WaitTooLong`]), the wait would reach the deadline ([`GiveUp::Deadline`]), or the
/// shared `budget` has no retry left ([`GiveUp::Budget`]). A server-requested wait is a retry
/// like any other: it spends an attempt and budget.
///
/// `op` returns the client's response (anything [`ResponseMeta`]) or a [`TransportError`] marked
/// with how far the request got.
pub async fn execute<R, E, F, Fut>(
    policy: &RetryPolicy,
    budget: &RetryBudget,
    call: Call,
    mut op: F,
) -> Result<R, RetryError<R, E>>
where
    R: ResponseMeta,
    F: FnMut(Attempt) -> Fut,
    Fut: Future<Output = Result<R, TransportError<E>>>,
{
    let clock = &*policy.clock;
    let stats = &*policy.stats;
    let start = clock.now();
    let deadline_at: Option<Instant> = policy.deadline.and_then(|d| start.checked_add(d));
    stats.request();
    budget.deposit();

    // One short lock per logical request; the fork is this request's own generator.
    let mut rng = lock(&policy.rng).fork();
    let key: Option<Arc<str>> = match call.key {
        IdempotencyKey::None => None,
        IdempotencyKey::Given(k) => Some(k),
        IdempotencyKey::Generate => Some(new_idempotency_key(&mut rng).into()),
    };
    let has_key = key.is_some();

    let mut number = 0u32;
    let mut prev_wait = policy.backoff.base();
    let mut last: Option<Last<R, E>> = None;
    let reason = loop {
        let left = deadline_at.map(|d| d.saturating_duration_since(clock.now()));
        if left == Some(Duration::ZERO) {
            break GiveUp::Deadline {
                wait: Duration::ZERO,
            };
        }
        let timeout = match (policy.attempt_timeout, left) {
            (Some(t), Some(l)) => Some(t.min(l)),
            (t, l) => t.or(l),
        };
        number += 1;
        stats.attempt();
        let attempt = Attempt {
            number,
            timeout,
            idempotency_key: key.clone(),
        };
        let outcome = with_timeout(clock, timeout, op(attempt)).await;

        let mut server_wait = None;
        let classification = match outcome {
            Some(Ok(resp)) => {
                if let Some(v) = resp.retry_after() {
                    server_wait = parse_retry_after_dated(v, resp.date(), clock.wall());
                    stats.retry_after(server_wait);
                }
                let v = policy
                    .classifier
                    .response(resp.status(), &call.method, has_key);
                if v == Classification::Success {
                    stats.finish(number, None);
                    return Ok(resp);
                }
                last = Some(Last::Response(resp));
                v
            }
            Some(Err(e)) => {
                let v = policy.classifier.transport(e.state, &call.method, has_key);
                last = Some(Last::Transport(e));
                v
            }
            None => {
                last = Some(Last::TimedOut(timeout.unwrap_or_default()));
                policy
                    .classifier
                    .transport(SendState::SentNoResponse, &call.method, has_key)
            }
        };
        if classification == Classification::Final {
            break GiveUp::NonRetryable;
        }
        if number >= policy.max_attempts {
            break GiveUp::Attempts;
        }
        let wait = match server_wait {
            Some(s) => match policy.retry_after_wait(s, &mut rng) {
                Ok(w) => w,
                Err(w) => break GiveUp::WaitTooLong { wait: w },
            },
            None => policy.backoff.delay(number - 1, prev_wait, &mut rng),
        };
        if wait > policy.max_wait {
            break GiveUp::WaitTooLong { wait };
        }
        if let Some(d) = deadline_at {
            // Waking at the deadline leaves no time for the attempt, so reaching it counts.
            if clock.now().checked_add(wait).is_none_or(|t| t >= d) {
                break GiveUp::Deadline { wait };
            }
        }
        if !budget.try_withdraw() {
            break GiveUp::Budget;
        }
        clock.sleep(wait).await;
        stats.wait(wait);
        prev_wait = wait;
    };
    stats.finish(number, Some(&reason));
    Err(RetryError {
        reason,
        attempts: number,
        elapsed: clock.now().saturating_duration_since(start),
        last,
    })
}
