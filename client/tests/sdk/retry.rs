//! The retry loop on a mock clock and seeded generator: the harness (scripted answers, a
//! manual clock, a budget that never runs out) and the loop's own limits, attempts and
//! deadline; the server's requested wait, idempotency and the retry budget in `retry/`.

use std::future::pending;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Response, StatusCode};
use tollgate_client::{
    execute, Attempt, Backoff, Call, Classification, Classifier, ClientStats, GiveUp, Jitter, Last,
    ManualClock, RetryBudget, RetryPolicy, SendState, TransportError,
};

type Out = Result<Response<()>, TransportError<io::Error>>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn resp(status: u16, retry_after: Option<&str>) -> Response<()> {
    let mut b = Response::builder().status(status);
    if let Some(v) = retry_after {
        b = b.header("retry-after", v);
    }
    b.body(()).unwrap()
}

fn ok(status: u16, retry_after: Option<&str>) -> Out {
    Ok(resp(status, retry_after))
}

/// A policy on a fresh manual clock with a seeded generator and its own stats.
fn setup(seed: u64) -> (RetryPolicy, ManualClock) {
    let clock = ManualClock::default();
    let policy = RetryPolicy::new()
        .clock(Arc::new(clock.clone()))
        .rng(fastrand::Rng::with_seed(seed))
        .stats(Arc::new(ClientStats::new()));
    (policy, clock)
}

/// A budget that never runs out (a floor of a million retries per second).
fn plenty(clock: &ManualClock) -> RetryBudget {
    RetryBudget::with_clock(s(10), 1_000_000, 0.0, Arc::new(clock.clone()))
}

/// Plays `script` in order (the last entry repeats) and records every attempt.
fn scripted(
    script: Vec<Out>,
    seen: Arc<Mutex<Vec<Attempt>>>,
) -> impl FnMut(Attempt) -> std::future::Ready<Out> {
    let script = Arc::new(Mutex::new(script));
    move |attempt| {
        seen.lock().unwrap().push(attempt);
        let mut s = script.lock().unwrap();
        let out = if s.len() > 1 {
            s.remove(0)
        } else {
            clone_out(&s[0])
        };
        std::future::ready(out)
    }
}

fn clone_out(o: &Out) -> Out {
    match o {
        Ok(r) => Ok(resp(
            r.status().as_u16(),
            r.headers().get("retry-after").map(|v| v.to_str().unwrap()),
        )),
        Err(e) => Err(TransportError {
            state: e.state,
            error: io::Error::new(e.error.kind(), e.error.to_string()),
        }),
    }
}

fn refused() -> Out {
    Err(TransportError::not_sent(io::Error::from(
        io::ErrorKind::ConnectionRefused,
    )))
}

fn reset() -> Out {
    Err(TransportError::sent_no_response(io::Error::from(
        io::ErrorKind::ConnectionReset,
    )))
}

mod budget;
mod idempotency;
mod server_wait;

#[tokio::test]
async fn get_retries_until_success_and_counts() {
    let (policy, clock) = setup(1);
    let seen = Arc::default();
    let out = execute(
        &policy,
        &plenty(&clock),
        Call::new(Method::GET),
        scripted(
            vec![ok(503, None), ok(502, None), ok(200, None)],
            Arc::clone(&seen),
        ),
    )
    .await;
    assert_eq!(out.unwrap().status(), StatusCode::OK);
    let numbers: Vec<u32> = seen.lock().unwrap().iter().map(|a| a.number).collect();
    assert_eq!(numbers, [1, 2, 3]);
    let st = policy.client_stats().snapshot();
    assert_eq!(
        (st.requests, st.attempts, st.successes, st.waits),
        (1, 3, 1, 2)
    );
    assert_eq!(st.abandoned(), 0);
    assert_eq!(st.wait_total, clock.sleeps().iter().sum());
    assert!((st.amplification() - 3.0).abs() < 1e-9);
}

#[tokio::test]
async fn attempts_are_limited() {
    let (policy, clock) = setup(2);
    let policy = policy.max_attempts(3);
    let err = execute(
        &policy,
        &plenty(&clock),
        Call::new(Method::GET),
        scripted(vec![ok(503, None)], Arc::default()),
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason, GiveUp::Attempts);
    assert_eq!(err.attempts, 3);
    assert_eq!(err.response().unwrap().status(), 503);
    assert_eq!(clock.sleeps().len(), 2, "no sleep after the last attempt");
    assert_eq!(policy.client_stats().snapshot().abandoned_attempts, 1);
}

#[tokio::test]
async fn deadline_is_never_overrun() {
    let deadline = s(2);
    for seed in 0..300 {
        let (policy, clock) = setup(seed);
        let policy = policy
            .deadline(Some(deadline))
            .attempt_timeout(Some(ms(700)))
            .max_attempts(1_000)
            .backoff(Backoff::new(ms(50), s(1)).with_jitter(Jitter::Full));
        let mut rng = fastrand::Rng::with_seed(seed ^ 0xdead);
        let c = clock.clone();
        let err = execute(
            &policy,
            &plenty(&clock),
            Call::new(Method::GET),
            |a: Attempt| {
                let c = c.clone();
                let hang = rng.u8(..) < 40;
                let took = ms(rng.u64(0..600));
                async move {
                    let t = a.timeout.expect("a deadline bounds every attempt");
                    assert!(t <= ms(700));
                    assert!(
                        c.elapsed() + t <= deadline,
                        "attempt may not outlive the deadline"
                    );
                    if hang {
                        pending::<()>().await;
                    }
                    c.advance(took.min(t));
                    ok(503, None)
                }
            },
        )
        .await
        .unwrap_err();
        assert!(
            clock.elapsed() <= deadline,
            "seed {seed}: {:?}",
            clock.elapsed()
        );
        match err.reason {
            GiveUp::Deadline { wait } => {
                assert!(
                    clock.elapsed() + wait >= deadline,
                    "seed {seed}: stopped early"
                );
            }
            other => panic!("seed {seed}: {other:?}"),
        }
        assert_eq!(err.elapsed, clock.elapsed());
    }
}

#[tokio::test]
async fn no_time_for_a_first_attempt() {
    let (policy, clock) = setup(3);
    let policy = policy.deadline(Some(Duration::ZERO));
    let err = execute(
        &policy,
        &plenty(&clock),
        Call::new(Method::GET),
        scripted(vec![ok(200, None)], Arc::default()),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.reason,
        GiveUp::Deadline {
            wait: Duration::ZERO
        }
    );
    assert_eq!(err.attempts, 0);
    assert!(err.last.is_none());
}
