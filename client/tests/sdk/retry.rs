//! The retry loop on a mock clock and seeded generator: deadline, attempts, Retry-After, budget,
//! idempotency.

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

#[tokio::test]
async fn retry_after_longer_than_the_deadline_stops_at_once() {
    let (policy, clock) = setup(4);
    let policy = policy.deadline(Some(s(10)));
    let err = execute(
        &policy,
        &plenty(&clock),
        Call::new(Method::GET),
        scripted(vec![ok(429, Some("20"))], Arc::default()),
    )
    .await
    .unwrap_err();
    match err.reason {
        GiveUp::Deadline { wait } => assert!(wait >= s(20), "{wait:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(err.wait().map(|w| w >= s(20)), Some(true));
    assert!(clock.sleeps().is_empty(), "gave up without sleeping");
    assert_eq!(policy.client_stats().snapshot().abandoned_deadline, 1);
}

#[tokio::test]
async fn retry_after_above_max_wait_is_wait_too_long() {
    let (policy, clock) = setup(5);
    let policy = policy.max_wait(s(60)).deadline(None);
    for value in ["3600", "Thu, 01 Jan 2026 01:00:00 GMT"] {
        let err = execute(
            &policy,
            &plenty(&clock),
            Call::new(Method::GET),
            scripted(vec![ok(503, Some(value))], Arc::default()),
        )
        .await
        .unwrap_err();
        assert_eq!(err.reason, GiveUp::WaitTooLong { wait: s(3600) }, "{value}");
        assert_eq!(err.attempts, 1);
    }
    assert!(clock.sleeps().is_empty());
    let st = policy.client_stats().snapshot();
    assert_eq!(st.abandoned_wait_too_long, 2);
    assert_eq!((st.retry_after_seen, st.retry_after_total), (2, s(7200)));
}

#[tokio::test]
async fn retry_after_is_honoured_with_bounded_jitter_on_top() {
    let mut first_sleeps = Vec::new();
    for seed in 0..500 {
        let (policy, clock) = setup(seed);
        let out = execute(
            &policy,
            &plenty(&clock),
            Call::new(Method::GET),
            scripted(vec![ok(429, Some("7")), ok(200, None)], Arc::default()),
        )
        .await;
        assert!(out.is_ok());
        let w = clock.sleeps()[0];
        // Default jitter: up to max(10 % of 7 s, 1 s) on top, never below the server's value.
        assert!(w >= s(7) && w <= s(8), "seed {seed}: {w:?}");
        first_sleeps.push(w);
    }
    first_sleeps.sort();
    first_sleeps.dedup();
    assert!(
        first_sleeps.len() > 400,
        "clients told the same second must not wake together"
    );
}

#[tokio::test]
async fn retry_after_date_and_jitter_limits() {
    // ManualClock::default() starts at 2026-01-01T00:00:00Z (a Thursday).
    let (policy, clock) = setup(6);
    let policy = policy
        .retry_after_jitter(0.5, ms(0))
        .max_wait(s(100))
        .deadline(None);
    let out = execute(
        &policy,
        &plenty(&clock),
        Call::new(Method::GET),
        scripted(
            vec![
                ok(503, Some("Thu, 01 Jan 2026 00:00:30 GMT")),
                ok(200, None),
            ],
            Arc::default(),
        ),
    )
    .await;
    out.unwrap();
    let w = clock.sleeps()[0];
    assert!(w >= s(30) && w <= s(45), "{w:?}");

    // Jitter is cut to max_wait, the server's value never is.
    for seed in 0..100 {
        let (policy, clock) = setup(seed);
        let policy = policy.max_wait(s(60)).deadline(None);
        execute(
            &policy,
            &plenty(&clock),
            Call::new(Method::GET),
            scripted(vec![ok(429, Some("59")), ok(200, None)], Arc::default()),
        )
        .await
        .unwrap();
        let w = clock.sleeps()[0];
        assert!(w >= s(59) && w <= s(60), "{w:?}");
    }

    // A past date (or 0) still waits the backoff floor plus jitter, never zero.
    let (policy, clock) = setup(7);
    let policy = policy.backoff(Backoff::default().with_floor(ms(10)));
    execute(
        &policy,
        &plenty(&clock),
        Call::new(Method::GET),
        scripted(
            vec![
                ok(503, Some("Wed, 31 Dec 2025 23:00:00 GMT")),
                ok(200, None),
            ],
            Arc::default(),
        ),
    )
    .await
    .unwrap();
    assert!(clock.sleeps()[0] >= ms(10));
}

#[tokio::test]
async fn server_requested_wait_spends_attempts_and_budget() {
    let (policy, clock) = setup(8);
    let empty = RetryBudget::with_clock(s(10), 0, 0.0, Arc::new(clock.clone()));
    let err = execute(
        &policy,
        &empty,
        Call::new(Method::GET),
        scripted(vec![ok(429, Some("1"))], Arc::default()),
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason, GiveUp::Budget);
    assert!(clock.sleeps().is_empty());

    let policy = policy.max_attempts(2);
    let err = execute(
        &policy,
        &plenty(&clock),
        Call::new(Method::GET),
        scripted(vec![ok(429, Some("1"))], Arc::default()),
    )
    .await
    .unwrap_err();
    assert_eq!((err.reason, err.attempts), (GiveUp::Attempts, 2));
}

#[tokio::test]
async fn invalid_retry_after_falls_back_to_backoff() {
    let (policy, clock) = setup(9);
    let b = Backoff::new(ms(100), s(5)).with_floor(ms(5));
    let policy = policy.backoff(b);
    execute(
        &policy,
        &plenty(&clock),
        Call::new(Method::GET),
        scripted(vec![ok(503, Some("soon")), ok(200, None)], Arc::default()),
    )
    .await
    .unwrap();
    let w = clock.sleeps()[0];
    assert!(w >= ms(5) && w <= ms(100), "{w:?}");
    let st = policy.client_stats().snapshot();
    assert_eq!((st.retry_after_invalid, st.retry_after_seen), (1, 0));
}

#[tokio::test]
async fn post_without_key_is_never_retried() {
    let (policy, clock) = setup(10);
    let budget = plenty(&clock);
    for out in [
        ok(429, Some("1")),
        ok(503, None),
        ok(502, None),
        ok(504, None),
        ok(409, None),
        reset(),
    ] {
        for method in [Method::POST, Method::PATCH] {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let err = execute(
                &policy,
                &budget,
                Call::new(method.clone()),
                scripted(vec![clone_out(&out)], Arc::clone(&seen)),
            )
            .await
            .unwrap_err();
            assert_eq!(err.reason, GiveUp::NonRetryable, "{method} {out:?}");
            assert_eq!(seen.lock().unwrap().len(), 1);
            assert!(seen.lock().unwrap()[0].idempotency_key.is_none());
        }
    }
    assert!(clock.sleeps().is_empty());
    assert_eq!(policy.client_stats().snapshot().attempts, 12);
}

#[tokio::test]
async fn post_with_key_is_retried_with_the_same_key() {
    let (policy, clock) = setup(11);
    let budget = plenty(&clock);
    let mut keys = Vec::new();
    for _ in 0..2 {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let out = execute(
            &policy,
            &budget,
            Call::new(Method::POST).generate_idempotency_key(),
            scripted(
                vec![ok(503, None), reset(), ok(409, None), ok(201, None)],
                Arc::clone(&seen),
            ),
        )
        .await;
        assert_eq!(out.unwrap().status(), 201);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 4);
        let key = seen[0].idempotency_key.clone().unwrap();
        assert!(seen
            .iter()
            .all(|a| a.idempotency_key.as_ref() == Some(&key)));
        // UUID v4 shape: 8-4-4-4-12 lower-case hex, version 4, variant 10xx.
        assert_eq!(key.len(), 36);
        let b = key.as_bytes();
        assert_eq!([b[8], b[13], b[18], b[23]], [b'-'; 4]);
        assert_eq!(b[14], b'4');
        assert!(matches!(b[19], b'8' | b'9' | b'a' | b'b'));
        assert!(key
            .chars()
            .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        keys.push(key);
    }
    assert_ne!(keys[0], keys[1], "one key per logical request");

    let seen = Arc::new(Mutex::new(Vec::new()));
    execute(
        &policy,
        &budget,
        Call::new(Method::PATCH).idempotency_key("order-42"),
        scripted(vec![ok(429, Some("0")), ok(200, None)], Arc::clone(&seen)),
    )
    .await
    .unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen
        .iter()
        .all(|a| a.idempotency_key.as_deref() == Some("order-42")));
}

#[tokio::test]
async fn connect_errors_are_retried_even_for_post() {
    let (policy, clock) = setup(12);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = execute(
        &policy,
        &plenty(&clock),
        Call::new(Method::POST),
        scripted(vec![refused(), refused(), ok(201, None)], Arc::clone(&seen)),
    )
    .await;
    assert_eq!(out.unwrap().status(), 201);
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn timeout_after_a_sent_post_is_not_retried() {
    let (policy, clock) = setup(13);
    let policy = policy.attempt_timeout(Some(s(1)));
    let calls = Arc::new(Mutex::new(0));
    let c = Arc::clone(&calls);
    let err = execute(&policy, &plenty(&clock), Call::new(Method::POST), |_a| {
        *c.lock().unwrap() += 1;
        async { pending::<Out>().await }
    })
    .await
    .unwrap_err();
    assert_eq!(err.reason, GiveUp::NonRetryable);
    assert!(matches!(err.last, Some(Last::TimedOut(d)) if d == s(1)));
    assert_eq!(*calls.lock().unwrap(), 1);
    assert_eq!(clock.elapsed(), s(1));

    // The same timeout on a GET is retried.
    let policy = policy.max_attempts(3);
    let err = execute(
        &policy,
        &plenty(&clock),
        Call::new(Method::GET),
        |_a| async { pending::<Out>().await },
    )
    .await
    .unwrap_err();
    assert_eq!((err.reason, err.attempts), (GiveUp::Attempts, 3));
}

#[tokio::test]
async fn final_statuses_are_not_retried() {
    let (policy, clock) = setup(14);
    for status in [400, 401, 403, 404, 409, 422, 500, 501] {
        let err = execute(
            &policy,
            &plenty(&clock),
            Call::new(Method::GET),
            scripted(vec![ok(status, Some("1"))], Arc::default()),
        )
        .await
        .unwrap_err();
        assert_eq!(
            (err.reason, err.attempts),
            (GiveUp::NonRetryable, 1),
            "{status}"
        );
        assert_eq!(err.response().unwrap().status(), status);
    }
    assert!(clock.sleeps().is_empty());
    assert_eq!(policy.client_stats().snapshot().abandoned_non_retryable, 8);
}

/// Sequential logical requests against a server that always answers 429.
async fn storm(policy: &RetryPolicy, budget: &RetryBudget, n: usize) {
    for _ in 0..n {
        let r = execute(
            policy,
            budget,
            Call::new(Method::GET),
            scripted(vec![ok(429, None)], Arc::default()),
        )
        .await;
        assert!(r.is_err());
    }
}

#[tokio::test]
async fn budget_caps_amplification() {
    let (policy, clock) = setup(15);
    let policy = policy
        .max_attempts(10)
        .deadline(None)
        .backoff(Backoff::new(ms(10), ms(100)));
    let budget = RetryBudget::with_clock(s(10), 0, 0.1, Arc::new(clock.clone()));
    storm(&policy, &budget, 2_000).await;
    let st = policy.client_stats().snapshot();
    assert_eq!(st.requests, 2_000);
    // Without a budget this would be 10 attempts per request.
    assert!(st.amplification() <= 1.1, "{}", st.amplification());
    assert!(
        st.amplification() > 1.05,
        "the budget is used: {}",
        st.amplification()
    );
    assert!(st.abandoned_budget > 1_500);
}

#[tokio::test]
async fn budget_floor_is_the_only_extra() {
    let (policy, clock) = setup(16);
    let policy = policy
        .max_attempts(10)
        .deadline(None)
        .backoff(Backoff::new(ms(10), ms(100)));
    let (min_per_sec, ttl, ratio) = (2u32, s(10), 0.2);
    let budget = RetryBudget::with_clock(ttl, min_per_sec, ratio, Arc::new(clock.clone()));
    storm(&policy, &budget, 1_000).await;
    let st = policy.client_stats().snapshot();
    let retries = (st.attempts - st.requests) as f64;
    let floor = f64::from(min_per_sec) * (clock.elapsed() + ttl).as_secs_f64();
    assert!(
        retries <= ratio * st.requests as f64 + floor,
        "{retries} retries over {:?}",
        clock.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_is_shared_by_concurrent_tasks() {
    let (policy, clock) = setup(17);
    let policy = policy
        .max_attempts(10)
        .deadline(None)
        .backoff(Backoff::new(ms(10), ms(100)));
    let budget = RetryBudget::with_clock(s(10), 0, 0.25, Arc::new(clock.clone()));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (p, b) = (policy.clone(), budget.clone());
            tokio::spawn(async move { storm(&p, &b, 250).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let st = policy.client_stats().snapshot();
    assert_eq!(st.requests, 2_000);
    assert!(st.amplification() <= 1.25, "{}", st.amplification());
}

/// The public classification the loop acts on: what a caller's own loop would see from the
/// same [`Classifier`].
#[test]
fn the_classifier_tells_success_retry_and_final_apart() {
    let c = Classifier::default();
    assert_eq!(
        c.response(StatusCode::OK, &Method::POST, false),
        Classification::Success
    );
    assert_eq!(
        c.response(StatusCode::TOO_MANY_REQUESTS, &Method::GET, false),
        Classification::Retry
    );
    assert_eq!(
        c.response(StatusCode::TOO_MANY_REQUESTS, &Method::POST, false),
        Classification::Final
    );
    assert_eq!(
        c.transport(SendState::NotSent, &Method::POST, false),
        Classification::Retry
    );
}
