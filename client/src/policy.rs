//! The retry loop: one logical request, many attempts, one deadline.

use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use http::Method;

use super::backoff::Backoff;
use super::budget::RetryBudget;
use super::classify::{Classification, Classifier, ResponseMeta, SendState, TransportError};
use super::clock::{Clock, TokioClock};
use super::retry_after::parse_retry_after;
use super::stats::ClientStats;
use super::{lock, saturating_nanos};

/// How one logical request is retried: attempts, deadline, waits, classification, and the
/// injected clock, randomness and counters.
///
/// Clones share the clock, the random generator and the [`ClientStats`], so one policy (or its
/// clones) per client gives one set of counters.
#[derive(Clone)]
pub struct RetryPolicy {
    max_attempts: u32,
    deadline: Option<Duration>,
    attempt_timeout: Option<Duration>,
    max_wait: Duration,
    backoff: Backoff,
    retry_after_jitter: f64,
    retry_after_spread: Duration,
    classifier: Classifier,
    clock: Arc<dyn Clock>,
    rng: Arc<Mutex<fastrand::Rng>>,
    stats: Arc<ClientStats>,
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
    /// ends the call at once with [`GiveUp::WaitTooLong`] so the work can be parked.
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
    fn retry_after_wait(
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

/// What the request carries for idempotency, resolved once per logical request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum IdempotencyKey {
    /// No key: a non-idempotent method is retried only when the request never left.
    #[default]
    None,
    /// The caller's key, sent on every attempt.
    Given(Arc<str>),
    /// Make a random UUID-v4-style key once for this logical request and reuse it on every
    /// attempt, so the server can deduplicate.
    Generate,
}

/// The parts of a request that decide whether it may be repeated.
#[derive(Clone, Debug)]
pub struct Call {
    method: Method,
    key: IdempotencyKey,
}

impl Call {
    /// A call with `method` and no idempotency key.
    pub fn new(method: Method) -> Self {
        Call {
            method,
            key: IdempotencyKey::None,
        }
    }

    /// Uses the caller's `Idempotency-Key`.
    pub fn idempotency_key(mut self, key: impl Into<Arc<str>>) -> Self {
        self.key = IdempotencyKey::Given(key.into());
        self
    }

    /// Lets the SDK make one key for this logical request.
    pub fn generate_idempotency_key(mut self) -> Self {
        self.key = IdempotencyKey::Generate;
        self
    }

    /// Sets the key choice directly.
    pub fn with_key(mut self, key: IdempotencyKey) -> Self {
        self.key = key;
        self
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.method
    }
}

/// What one attempt gets from the retry loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the first try.
    pub number: u32,
    /// This attempt's time limit: the policy's attempt timeout cut to the time left before the
    /// deadline (`None`: neither is set). The loop enforces it too; pass it to the client so it
    /// can give up cleanly.
    pub timeout: Option<Duration>,
    /// The `Idempotency-Key` to send, the same on every attempt.
    pub idempotency_key: Option<Arc<str>>,
}

/// Why a logical request stopped without success.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GiveUp {
    /// The next wait would reach the deadline (or no time was left); `wait` is that wait, so the
    /// application can park the work and try again after it.
    Deadline {
        /// The wait that did not fit.
        wait: Duration,
    },
    /// The next wait (usually the server's Retry-After) is above the per-call maximum wait.
    WaitTooLong {
        /// The wait asked for.
        wait: Duration,
    },
    /// The shared retry budget is empty: the service is likely in trouble, retries would only
    /// add load.
    Budget,
    /// The last allowed attempt failed.
    Attempts,
    /// The outcome may not or need not be retried (a final status, or an unsafe method after
    /// the request may have been executed).
    NonRetryable,
}

impl GiveUp {
    /// The metric label: `deadline`, `wait_too_long`, `budget`, `attempts`, `non_retryable`.
    pub fn as_str(&self) -> &'static str {
        match self {
            GiveUp::Deadline { .. } => "deadline",
            GiveUp::WaitTooLong { .. } => "wait_too_long",
            GiveUp::Budget => "budget",
            GiveUp::Attempts => "attempts",
            GiveUp::NonRetryable => "non_retryable",
        }
    }

    /// The wait that was not taken, for `Deadline` and `WaitTooLong`.
    pub fn wait(&self) -> Option<Duration> {
        match *self {
            GiveUp::Deadline { wait } | GiveUp::WaitTooLong { wait } => Some(wait),
            _ => None,
        }
    }
}

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUp::Deadline { wait } => write!(f, "next wait of {wait:?} would pass the deadline"),
            GiveUp::WaitTooLong { wait } => write!(f, "next wait of {wait:?} exceeds the maximum"),
            GiveUp::Budget => f.write_str("retry budget exhausted"),
            GiveUp::Attempts => f.write_str("attempts exhausted"),
            GiveUp::NonRetryable => f.write_str("not retryable"),
        }
    }
}

/// The outcome of the last attempt of a request that gave up.
pub enum Last<R, E> {
    /// A response that was final or was the last retryable one.
    Response(R),
    /// The client's transport error.
    Transport(TransportError<E>),
    /// The attempt did not finish within its timeout (treated as sent, no response).
    TimedOut(Duration),
}

impl<R: ResponseMeta, E: fmt::Debug> fmt::Debug for Last<R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Last::Response(r) => f.debug_tuple("Response").field(&r.status()).finish(),
            Last::Transport(e) => f.debug_tuple("Transport").field(e).finish(),
            Last::TimedOut(d) => f.debug_tuple("TimedOut").field(d).finish(),
        }
    }
}

/// A logical request that ended without success: why, after how many attempts, and the last
/// outcome (`None` only when the deadline left no time for a first attempt).
pub struct RetryError<R, E> {
    /// Why the loop stopped.
    pub reason: GiveUp,
    /// Attempts made.
    pub attempts: u32,
    /// Time from the start of the logical request to giving up.
    pub elapsed: Duration,
    /// The last attempt's outcome.
    pub last: Option<Last<R, E>>,
}

impl<R, E> RetryError<R, E> {
    /// The last response, if the last attempt got one (e.g. the final 429 or 404).
    pub fn response(&self) -> Option<&R> {
        match &self.last {
            Some(Last::Response(r)) => Some(r),
            _ => None,
        }
    }

    /// The wait that was not taken, for [`GiveUp::Deadline`] and [`GiveUp::WaitTooLong`].
    pub fn wait(&self) -> Option<Duration> {
        self.reason.wait()
    }
}

impl<R: ResponseMeta, E: fmt::Debug> fmt::Debug for RetryError<R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryError")
            .field("reason", &self.reason)
            .field("attempts", &self.attempts)
            .field("elapsed", &self.elapsed)
            .field("last", &self.last)
            .finish()
    }
}

impl<R: ResponseMeta, E: fmt::Display> fmt::Display for RetryError<R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gave up after {} attempt(s): {}",
            self.attempts, self.reason
        )?;
        match &self.last {
            Some(Last::Response(r)) => write!(f, " (last status {})", r.status()),
            Some(Last::Transport(e)) => write!(f, " (last error: {e})"),
            Some(Last::TimedOut(d)) => write!(f, " (last attempt timed out after {d:?})"),
            None => Ok(()),
        }
    }
}

impl<R, E> std::error::Error for RetryError<R, E>
where
    R: ResponseMeta,
    E: std::error::Error + 'static,
{
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.last {
            Some(Last::Transport(e)) => Some(&e.error),
            _ => None,
        }
    }
}

/// A random UUID-v4-style string (version and variant bits set) from `rng`.
pub fn new_idempotency_key(rng: &mut fastrand::Rng) -> String {
    let mut b = rng.u128(..).to_be_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{byte:02x}"));
    }
    s
}

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
/// Per attempt: classify the outcome ([`Classifier`], the method and the key of `call`); on a
/// retryable one, wait for the server's Retry-After plus jitter, or the backoff; but stop at once,
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
                    server_wait = parse_retry_after(v, clock.wall());
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
