//! `Retry-After`: honoured with bounded jitter on top, capped by the deadline and `max_wait`,
//! read as seconds or an HTTP-date, spending attempts and budget, ignored when invalid.

use super::*;

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
