//! Which failures are retried: a request that may have been applied is retried only with an
//! idempotency key (the same key each attempt); one never sent always is; final statuses never.

use super::*;

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
