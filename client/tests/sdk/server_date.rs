//! An HTTP-date `Retry-After` measured from the response's own `Date`: a client whose wall clock
//! is 30 s ahead or behind waits what the server asked, not 30 s more or nothing at all.

use std::io;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use http::{Method, Response};
use tollgate_client::{
    execute, parse_retry_after_dated, Call, ClientStats, ManualClock, RetryBudget, RetryPolicy,
    SkewedClock, TransportError,
};

type Out = Result<Response<()>, TransportError<io::Error>>;

/// ManualClock::default() starts at 2026-01-01T00:00:00Z (a Thursday): the server's clock.
const SERVER_NOW: &str = "Thu, 01 Jan 2026 00:00:00 GMT";
const IN_TWO_SECONDS: &str = "Thu, 01 Jan 2026 00:00:02 GMT";

/// The first wait of one GET answered 429 (Retry-After `IN_TWO_SECONDS`, `Date` if given), then
/// 200, by a client `skew` seconds off the server's clock (no jitter).
async fn first_wait(skew: i64, date: Option<&str>) -> Duration {
    let clock = ManualClock::default();
    let skewed = SkewedClock::by_seconds(clock.clone(), skew);
    let policy = RetryPolicy::new()
        .clock(Arc::new(skewed))
        .rng(fastrand::Rng::with_seed(1))
        .stats(Arc::new(ClientStats::new()))
        .retry_after_jitter(0.0, Duration::ZERO)
        .max_wait(Duration::from_secs(120))
        .deadline(None);
    let budget = RetryBudget::with_clock(
        Duration::from_secs(10),
        1_000_000,
        0.0,
        Arc::new(clock.clone()),
    );
    let refused = {
        let mut b = Response::builder()
            .status(429)
            .header("retry-after", IN_TWO_SECONDS);
        if let Some(d) = date {
            b = b.header("date", d);
        }
        b.body(()).unwrap()
    };
    let mut script = vec![Ok(refused), Ok(Response::new(()))].into_iter();
    execute(&policy, &budget, Call::new(Method::GET), move |_| {
        std::future::ready::<Out>(script.next().expect("two attempts"))
    })
    .await
    .unwrap();
    clock.sleeps()[0]
}

#[tokio::test]
async fn a_skewed_client_waits_what_the_server_meant_when_the_response_has_a_date() {
    for skew in [-30, 0, 30] {
        assert_eq!(
            first_wait(skew, Some(SERVER_NOW)).await,
            Duration::from_secs(2),
            "skew {skew} s"
        );
    }
}

#[tokio::test]
async fn without_a_valid_date_the_client_clock_is_the_reference() {
    // 30 s slow: the date looks 32 s away; 30 s fast: already past (the backoff floor then).
    assert_eq!(first_wait(-30, None).await, Duration::from_secs(32));
    assert_eq!(
        first_wait(-30, Some("yesterday")).await,
        Duration::from_secs(32)
    );
    assert!(first_wait(30, None).await < Duration::from_secs(2));
}

#[test]
fn delay_seconds_ignore_the_date_and_a_past_date_is_zero() {
    let now = UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01T00:00:00Z
    let skewed = now - Duration::from_secs(30);
    assert_eq!(
        parse_retry_after_dated("5", Some(SERVER_NOW), skewed),
        Some(Duration::from_secs(5))
    );
    assert_eq!(
        parse_retry_after_dated(SERVER_NOW, Some(IN_TWO_SECONDS), skewed),
        Some(Duration::ZERO)
    );
    assert_eq!(
        parse_retry_after_dated("garbage", Some(SERVER_NOW), skewed),
        None
    );
}

#[test]
fn a_clock_that_agrees_with_the_date_keeps_its_sub_second_part() {
    // The server answered at 00:00:00.x, which its `Date` truncates to 00:00:00; a client whose
    // clock reads 00:00:00.300 (agreeing to within the `Date`'s second) waits the 1.7 s to the
    // named instant, not 2 s: callers refused across one second return together.
    let date = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    let now = date + Duration::from_millis(300);
    assert_eq!(
        parse_retry_after_dated(IN_TWO_SECONDS, Some(SERVER_NOW), now),
        Some(Duration::from_millis(1_700))
    );
    // 1.9 s past the `Date` still agrees; 2 s past is a skew, corrected by the `Date`.
    assert_eq!(
        parse_retry_after_dated(
            IN_TWO_SECONDS,
            Some(SERVER_NOW),
            date + Duration::from_millis(1_900)
        ),
        Some(Duration::from_millis(100))
    );
    assert_eq!(
        parse_retry_after_dated(
            IN_TWO_SECONDS,
            Some(SERVER_NOW),
            date + Duration::from_secs(2)
        ),
        Some(Duration::from_secs(2))
    );
    // A clock a little behind agrees too (200 ms: it waits 2.2 s, to the same instant); more
    // than a second behind is a skew.
    assert_eq!(
        parse_retry_after_dated(
            IN_TWO_SECONDS,
            Some(SERVER_NOW),
            date - Duration::from_millis(200)
        ),
        Some(Duration::from_millis(2_200))
    );
    assert_eq!(
        parse_retry_after_dated(
            IN_TWO_SECONDS,
            Some(SERVER_NOW),
            date - Duration::from_millis(1_001)
        ),
        Some(Duration::from_secs(2))
    );
}
