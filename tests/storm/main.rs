//! The retry storms on loopback, at the tests' size (`Size::quick`: 100 clients at
//! once, or 24 steady clients around a 2 s outage), one test per scenario, each bounded in
//! count and time. The storms run one at a time (they measure time on a shared machine).
//! `multi_server` needs the `redis` feature and starts its own `redis-server`.
#![cfg(feature = "tower")]

#[path = "../../examples/storm/curve.rs"]
#[allow(dead_code)]
mod curve;
#[path = "../../examples/storm/faults.rs"]
mod faults;
#[cfg(feature = "redis")]
#[path = "../../examples/storm/multi.rs"]
mod multi;
#[path = "../../examples/storm/proxy.rs"]
mod proxy;
#[path = "../../examples/storm/scenario.rs"]
#[allow(dead_code)]
mod scenario;
#[path = "../../examples/storm/storm.rs"]
mod storm;
#[path = "../../examples/storm/table.rs"]
mod table;

use std::sync::Mutex;
use std::time::Duration;

use scenario::{run_scenario, Run, Scenario, Size};
use storm::{Outcome, Report};

/// One storm at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `scenario` at the tests' size, within 60 s, and checks what holds for every scenario.
fn storm(scenario: Scenario, redis: Option<&str>) -> Run {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let run = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(60),
            run_scenario(scenario, Size::quick(), redis),
        )
        .await
        .expect("the storm ends within 60 s")
    });
    eprintln!("{}\n{}", scenario.name(), table::table(&run));
    for r in [&run.naive, &run.sdk] {
        let abandoned: u64 = r.abandoned().iter().map(|(_, n)| n).sum();
        assert_eq!(r.succeeded() + abandoned, r.logical.len() as u64);
        assert!(r.attempts() >= r.logical.len() as u64, "{}", summary(r));
    }
    // The shared retry budget bounds the SDK's attempts, whatever the faults.
    assert!(
        run.sdk.amplification() <= run.sdk_bound() + 1e-9,
        "SDK amplification {:.2} above the budget's bound {:.2}",
        run.sdk.amplification(),
        run.sdk_bound()
    );
    run
}

fn summary(r: &Report) -> String {
    format!(
        "{} logical, {} attempts, {} succeeded, abandoned {:?}",
        r.logical.len(),
        r.attempts(),
        r.succeeded(),
        r.abandoned()
    )
}

fn abandoned(r: &Report, reason: &str) -> u64 {
    r.abandoned()
        .iter()
        .find(|(k, _)| *k == reason)
        .map_or(0, |(_, n)| *n)
}

#[test]
fn baseline_the_sdk_caps_amplification_and_recovers_more() {
    let run = storm(Scenario::Baseline, None);
    let (naive, sdk) = (&run.naive, &run.sdk);
    assert_eq!(sdk.logical.len(), 100);
    // The burst of 50 is admitted whoever asks.
    assert!(naive.succeeded() >= 50, "{}", summary(naive));
    assert!(sdk.amplification() < naive.amplification());
    // Waiting Retry-After lets the bucket refill: more requests get through in the end.
    assert!(
        sdk.succeeded() > naive.succeeded(),
        "{} vs {}",
        summary(sdk),
        summary(naive)
    );
}

#[test]
fn invalid_retry_after_is_ignored_or_refused_safely() {
    let run = storm(Scenario::InvalidRetryAfter, None);
    let sdk = &run.sdk;
    assert!(
        run.garbled.1 >= 5,
        "every kind of garbage was sent: {:?}",
        run.garbled
    );
    // Garbage and negative values do not parse: the SDK used its backoff for them.
    assert!(sdk.retry_after_invalid >= 2, "{}", sdk.retry_after_invalid);
    // Huge values and far-future dates saturate and are refused at once (the work can be
    // parked), instead of sleeping for a year or retrying at once.
    assert!(abandoned(sdk, "wait_too_long") >= 1, "{}", summary(sdk));
    assert!(
        sdk.elapsed < Duration::from_secs(8),
        "nobody slept on a huge Retry-After"
    );
    assert!(sdk.amplification() < run.naive.amplification());
}

#[test]
fn clock_skew_is_cancelled_by_the_response_date() {
    let run = storm(Scenario::ClockSkew, None);
    let sdk = &run.sdk;
    // Clients 30 s fast or slow read the HTTP-date `Retry-After` against the response's `Date`
    // (the server's clock): nobody reads "in 1 s" as 31 s (`wait_too_long`) or as already past.
    assert_eq!(abandoned(sdk, "wait_too_long"), 0, "{}", summary(sdk));
    assert!(sdk.elapsed < Duration::from_secs(8), "nobody waited 31 s");
    assert!(sdk.amplification() < run.naive.amplification());
}

#[test]
fn connection_faults_never_replay_an_unkeyed_post() {
    let run = storm(Scenario::ConnectionFaults, None);
    let (naive, sdk) = (&run.naive, &run.sdk);
    let (pn, ps) = run.proxy.expect("proxy counts");
    assert!(
        ps[1] >= 1 && ps[2] >= 1,
        "resets and silent connections happened: {ps:?}"
    );
    assert!(sdk.count(Outcome::Lost) >= 2, "{}", summary(sdk));
    // The naive client repeats POSTs whose response was lost: duplicated effects.
    assert!(naive.unkeyed_replays >= 1, "{pn:?}: the test sees replays");
    // The SDK repeats one only with its Idempotency-Key.
    assert_eq!(sdk.unkeyed_replays, 0, "an unkeyed POST was replayed");
    assert!(abandoned(sdk, "non_retryable") >= 1, "{}", summary(sdk));
}

#[test]
fn recovery_has_no_spike_when_capacity_returns() {
    let run = storm(Scenario::Recovery, None);
    check_recovery(&run);
}

/// The measure is `curve::spike_ratio`: attempts in the busiest 50 ms of the second after
/// capacity returns against those in the busiest 50 ms of normal operation before the outage
/// (all admitted in the recovery scenario). The SDK's returning clients
/// (Retry-After to the recovery, then up to 1 s of jitter) stay near normal traffic's highs; the
/// control that honours the same Retry-After without jitter comes back all at once, which shows
/// the measure sees a spike when there is one.
fn check_recovery(run: &Run) {
    let sdk = run.spike(&run.sdk).expect("steady scenario");
    let control = run.control.as_ref().expect("control run");
    let control = run.spike(control).expect("steady scenario");
    // Seen on this machine: SDK 0.9 to 1.9; control 4.1 to 9.7, and 2.5 while the rest of the
    // workspace's tests ran beside it (a loaded machine smears a synchronised return over a few
    // bins), so the control is only required to be the spikier one.
    assert!(sdk <= 2.5, "SDK recovery spike {sdk:.2}");
    assert!(
        control > sdk,
        "no-jitter control {control:.2} vs SDK {sdk:.2}: a synchronised return"
    );
    // The waiting requests made it once capacity returned; the naive client gave up.
    assert!(
        run.sdk.success() > run.naive.success(),
        "{}",
        summary(&run.sdk)
    );
}

#[cfg(feature = "redis")]
#[test]
fn multi_server_holds_the_global_limit_and_recovers_smoothly() {
    multi_server_holds_the_global_limit(Scenario::MultiServer);
}

#[cfg(feature = "redis")]
#[test]
fn multi_server_with_leases_holds_the_global_limit_and_recovers_smoothly() {
    multi_server_holds_the_global_limit(Scenario::MultiServerLeased);
}

#[cfg(feature = "redis")]
fn multi_server_holds_the_global_limit(scenario: Scenario) {
    let server = tollgate_testkit::redis_server::RedisServer::start();
    let run = storm(scenario, Some(&server.url()));
    let (bn, bs) = run.global_bound.expect("bounds");
    let admitted = (
        run.naive.count(Outcome::Admitted),
        run.sdk.count(Outcome::Admitted),
    );
    // Three servers, one limit: what all of them admitted together is within one bucket's
    // burst plus its rate over the run (three independent limiters would admit three times it).
    assert!(
        admitted.0 <= bn,
        "naive: {} admitted, bound {bn}",
        admitted.0
    );
    assert!(admitted.1 <= bs, "SDK: {} admitted, bound {bs}", admitted.1);
    // The offered load is above the limit, so the limit was reached.
    assert!(run.naive.count(Outcome::Throttled) >= 1);
    assert!(run.sdk.count(Outcome::Throttled) >= 1);
    check_recovery(&run);
}
