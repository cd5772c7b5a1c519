//! The retry budget: it caps the amplification of a storm, its floor is the only extra, and
//! concurrent tasks share it.

use super::*;

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
