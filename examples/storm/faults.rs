//! The HTTP fault layer the storm puts in front of the gateway's router (an axum middleware,
//! outermost): it rewrites refusals' `Retry-After` (invalid or extreme values, or an HTTP-date
//! instead of seconds) and, in its outage mode, answers every request with a 503 while
//! capacity is at zero. The gateway itself is unchanged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;
use tokio::time::Instant;
use tollgate::http::PROBLEM_JSON;

/// The invalid or extreme `Retry-After` values the layer sends, in turn.
pub const GARBLED: [&str; 5] = [
    "garbage",
    "negative",
    "huge",
    "past date",
    "far-future date",
];

/// What the layer does; shared by every server it is put in front of.
#[derive(Debug, Default)]
pub struct Faults {
    /// Share (0..=1) of 429 and 503 responses whose `Retry-After` is replaced by one of
    /// [`GARBLED`], in turn.
    pub garble_share: f64,
    /// Send `Retry-After` as an IMF-fixdate on the server's clock (the seconds' end, rounded up
    /// to the whole second) instead of delay-seconds.
    pub http_date: bool,
    /// Capacity is zero from the first instant until the second: every request is answered
    /// 503 `over_capacity` with `Retry-After` the time left until the second.
    outage: Mutex<Option<(Instant, Instant)>>,
    refusals: AtomicU64,
    garbled: AtomicU64,
}

impl Faults {
    /// A layer that changes nothing until configured.
    pub fn new() -> Faults {
        Faults::default()
    }

    /// Garbles `share` of the refusals' `Retry-After`.
    pub fn garble(mut self, share: f64) -> Faults {
        self.garble_share = share;
        self
    }

    /// `Retry-After` as an HTTP-date.
    pub fn http_date(mut self) -> Faults {
        self.http_date = true;
        self
    }

    /// Capacity at zero between `from` and `until` (set once the start is known).
    pub fn set_outage(&self, from: Instant, until: Instant) {
        *self.outage.lock().expect("outage") = Some((from, until));
    }

    /// Responses whose `Retry-After` was garbled so far.
    pub fn garbled(&self) -> u64 {
        self.garbled.load(Ordering::Relaxed)
    }

    /// The outage's time left at `now`, if one is in progress.
    fn outage_left(&self, now: Instant) -> Option<Duration> {
        let (from, until) = (*self.outage.lock().expect("outage"))?;
        (now >= from && now < until).then(|| until - now)
    }

    /// The header value for a wait of `wait`: whole seconds rounded up, or the HTTP-date of its
    /// end rounded up to the whole second.
    fn retry_after(&self, wait: Duration) -> HeaderValue {
        if self.http_date {
            let at = round_up_to_second(SystemTime::now() + wait);
            HeaderValue::from_str(&httpdate::fmt_http_date(at)).expect("an HTTP-date")
        } else {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            HeaderValue::from(secs.max(1))
        }
    }

    /// Rewrites a refusal's `Retry-After` as configured.
    fn rewrite(&self, headers: &mut http::HeaderMap) {
        // Relaxed: counters for choosing and reporting, no other memory depends on them.
        let n = self.refusals.fetch_add(1, Ordering::Relaxed);
        // Every k-th refusal, k = 1 / share, spread evenly instead of at random so that short
        // runs see the share they asked for.
        let garble = self.garble_share > 0.0
            && ((n + 1) as f64 * self.garble_share).floor()
                > (n as f64 * self.garble_share).floor();
        if garble {
            let kind = self.garbled.fetch_add(1, Ordering::Relaxed) as usize % GARBLED.len();
            let now = SystemTime::now();
            let value = match kind {
                0 => "soon".to_owned(),
                1 => "-5".to_owned(),
                2 => "99999999999999999999".to_owned(),
                3 => httpdate::fmt_http_date(now - Duration::from_secs(3600)),
                _ => httpdate::fmt_http_date(now + Duration::from_secs(10 * 365 * 86_400)),
            };
            headers.insert(RETRY_AFTER, HeaderValue::from_str(&value).expect("ASCII"));
        } else if self.http_date {
            let secs = headers
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if let Some(secs) = secs {
                headers.insert(RETRY_AFTER, self.retry_after(Duration::from_secs(secs)));
            }
        }
    }
}

fn round_up_to_second(t: SystemTime) -> SystemTime {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() + u64::from(since.subsec_nanos() > 0);
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// The middleware: `router.layer(axum::middleware::from_fn_with_state(faults, fault_layer))`.
pub async fn fault_layer(State(faults): State<Arc<Faults>>, req: Request, next: Next) -> Response {
    if let Some(left) = faults.outage_left(Instant::now()) {
        let mut res = outage_response();
        let value = faults.retry_after(left);
        res.headers_mut().insert(RETRY_AFTER, value);
        let _ = faults.refusals.fetch_add(1, Ordering::Relaxed);
        return res;
    }
    let mut res = next.run(req).await;
    let s = res.status();
    if s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::SERVICE_UNAVAILABLE {
        faults.rewrite(res.headers_mut());
    }
    res
}

/// The 503 the gateway sends when shared capacity is exhausted, in the example profile's words.
fn outage_response() -> Response {
    let body = serde_json::json!({
        "type": "https://errors.example.com/over-capacity",
        "title": "Service Unavailable",
        "status": 503,
        "code": "over_capacity",
        "detail": "Shared capacity is exhausted; retry after the time given in Retry-After.",
    });
    let mut res = (StatusCode::SERVICE_UNAVAILABLE, body.to_string()).into_response();
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}
