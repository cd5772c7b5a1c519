//! Why a logical request stopped without success ([`GiveUp`]), and the error that carries it
//! with the last attempt's outcome ([`RetryError`]).

use std::fmt;
use std::time::Duration;

use super::classify::{ResponseMeta, TransportError};

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
