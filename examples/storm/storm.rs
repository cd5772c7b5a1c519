//! The storm runner: many clients start together against one or more servers, with and without
//! the client SDK, and every attempt is recorded with when it was sent and how it ended (the
//! arrival curves are drawn from that record, `curve.rs`).
//!
//! The naive client does what a careless caller does: on anything but a 2xx it sends again at
//! once, up to a fixed number of attempts, whatever the method. The SDK client uses
//! `tollgate_client::execute`: it waits the server's Retry-After (jitter only on top), spends a
//! retry budget shared by all its tasks, stops at its deadline with a reason, and repeats a POST
//! whose response was lost only when it carries an `Idempotency-Key`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;
use tollgate_client::{
    execute, Call, ClientStats, GiveUp, RetryBudget, RetryPolicy, SkewedClock, TokioClock,
    TransportError,
};

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// The SDK client's shared retry budget: Finagle's defaults, what `RetryBudget::default()` gives.
pub const BUDGET_TTL: Duration = Duration::from_secs(10);
/// Retries per second always allowed (the budget's floor).
pub const BUDGET_MIN_PER_SEC: u32 = 10;
/// Retries earned per logical request.
pub const BUDGET_RATIO: f64 = 0.2;

/// What the clients' logical requests are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// `GET /v1/items` only.
    Reads,
    /// In turn: `GET /v1/items`, `POST /v1/items` without an `Idempotency-Key`, and
    /// `POST /v1/items` with one (made once per logical request, sent on every attempt).
    ReadsAndWrites,
}

/// One storm: who sends what, where, for how long.
#[derive(Clone, Debug)]
pub struct Storm {
    /// Concurrent clients (tasks of one client process, sharing one retry budget).
    pub clients: usize,
    /// Use the SDK, or retry at once.
    pub sdk: bool,
    /// Client `i` sends to `targets[i % len]`.
    pub targets: Vec<SocketAddr>,
    /// The bearer token every client sends.
    pub token: &'static str,
    /// What the logical requests are.
    pub mix: Mix,
    /// Attempts per logical request, the first included (both clients).
    pub max_attempts: u32,
    /// Each logical request's deadline (the SDK's; the naive client stops trying after it too).
    pub deadline: Duration,
    /// Each attempt's timeout (both clients).
    pub attempt_timeout: Duration,
    /// `None`: one logical request per client. `Some(d)`: each client starts a logical request
    /// every `period` on average (uniformly 0.5 to 1.5 periods apart, so that steady traffic is
    /// not in lockstep; or as soon as the previous one ends, if later) until `d` after the start.
    pub run_for: Option<Duration>,
    /// See `run_for`.
    pub period: Duration,
    /// Client `i`'s wall clock is off by `wall_skews[i % len]` seconds (empty: none). Only the SDK
    /// reads a wall clock (for an HTTP-date Retry-After).
    pub wall_skews: Vec<i64>,
    /// The SDK adds jitter on top of Retry-After (its default); `false` for a control run that
    /// honours Retry-After exactly.
    pub retry_after_jitter: bool,
    /// A new connection per attempt, so that a per-connection fault hits exactly one attempt.
    pub fresh_connections: bool,
    /// When capacity comes back, from the start: zero for a storm at the start, the end of the
    /// outage for an outage. `time_to_recover` is measured from here.
    pub recovery_at: Duration,
}

/// How one attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx.
    Admitted,
    /// A 429.
    Throttled,
    /// A 503.
    Unavailable,
    /// Another status (a 4xx of the application).
    Other,
    /// No response: reset, closed or timed out.
    Lost,
}

impl Outcome {
    /// A 429 or a 503.
    pub fn is_refusal(self) -> bool {
        matches!(self, Outcome::Throttled | Outcome::Unavailable)
    }
}

/// One attempt: when it was sent (from the start) and how it ended.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// Sent at, from the synchronised start.
    pub at: Duration,
    /// How it ended.
    pub outcome: Outcome,
}

/// One logical request: when it began and ended (from the start), and how.
#[derive(Clone, Copy, Debug)]
pub struct Logical {
    /// Its first attempt's start.
    pub began: Duration,
    /// Success, or the end of its last wait or attempt.
    pub ended: Duration,
    /// `None` on success, else why it was abandoned.
    pub gave_up: Option<&'static str>,
}

/// What a storm did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Every attempt, in no particular order.
    pub events: Vec<Event>,
    /// Every logical request.
    pub logical: Vec<Logical>,
    /// POSTs without an `Idempotency-Key` sent again after an attempt that may have executed
    /// (its response was lost): the duplicated side effects.
    pub unkeyed_replays: u64,
    /// The same for POSTs with a key: safe, the server deduplicates.
    pub keyed_replays: u64,
    /// `Retry-After` values the SDK could not parse (it used its backoff instead).
    pub retry_after_invalid: u64,
    /// See [`Storm::recovery_at`].
    pub recovery_at: Duration,
    /// From the start until every client finished.
    pub elapsed: Duration,
}

impl Report {
    /// Attempts sent.
    pub fn attempts(&self) -> u64 {
        self.events.len() as u64
    }
    /// Attempts that ended with `outcome`.
    pub fn count(&self, outcome: Outcome) -> u64 {
        self.events.iter().filter(|e| e.outcome == outcome).count() as u64
    }
    /// Logical requests that eventually succeeded.
    pub fn succeeded(&self) -> u64 {
        self.logical.iter().filter(|l| l.gave_up.is_none()).count() as u64
    }
    /// Attempts per logical request.
    pub fn amplification(&self) -> f64 {
        self.attempts() as f64 / self.logical.len().max(1) as f64
    }
    /// Share of logical requests that eventually succeeded.
    pub fn success(&self) -> f64 {
        self.succeeded() as f64 / self.logical.len().max(1) as f64
    }
    /// Abandoned logical requests by reason, most frequent first.
    pub fn abandoned(&self) -> Vec<(&'static str, u64)> {
        let mut out: Vec<(&'static str, u64)> = Vec::new();
        for reason in self.logical.iter().filter_map(|l| l.gave_up) {
            match out.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, n)) => *n += 1,
                None => out.push((reason, 1)),
            }
        }
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        out
    }
    /// From `recovery_at` until the last logical request that began before it ended: how long
    /// the backlog of the fault took to drain (succeed or give up). For a storm at the start
    /// (`recovery_at` zero) every logical request is the backlog.
    pub fn time_to_recover(&self) -> Duration {
        self.logical
            .iter()
            .filter(|l| self.recovery_at.is_zero() || l.began <= self.recovery_at)
            .map(|l| l.ended.saturating_sub(self.recovery_at))
            .max()
            .unwrap_or_default()
    }
    /// The `q`-quantile (0..=1) of what the callers waited: each logical request's time from its
    /// first attempt to its end (success or abandonment), retries and waits included.
    pub fn wait_quantile(&self, q: f64) -> Duration {
        let mut w: Vec<Duration> = self.logical.iter().map(|l| l.ended - l.began).collect();
        if w.is_empty() {
            return Duration::ZERO;
        }
        w.sort_unstable();
        let i = ((w.len() as f64 * q).ceil() as usize).clamp(1, w.len()) - 1;
        w[i]
    }
}

/// The most attempts per logical request the SDK's budget allows over a run of `elapsed`:
/// `1 + ratio * min(k, 3) + k * floor / logical`, with `k` the number of intervals of
/// 0.9 * ttl (how long a deposit or withdrawal stays at least) that cover the run and `floor`
/// the budget's constant reserve (`min_per_sec * ttl`). Within one such interval every
/// withdrawal is still counted at its end, so it holds at most the reserve plus the deposits
/// of the interval and of the ttl before it, which each deposit is part of for at most 3
/// intervals. For a run shorter than 9 s this is `1 + ratio + floor / logical`.
pub fn sdk_amplification_bound(logical: u64, elapsed: Duration) -> f64 {
    let live = BUDGET_TTL.mul_f64(0.9);
    let k = (elapsed.as_secs_f64() / live.as_secs_f64()).ceil().max(1.0);
    let floor = f64::from(BUDGET_MIN_PER_SEC) * BUDGET_TTL.as_secs_f64();
    1.0 + BUDGET_RATIO * k.min(3.0) + k * floor / logical.max(1) as f64
}

/// What one attempt's record shares with the run.
struct Recorder {
    start: Instant,
    events: Mutex<Vec<Event>>,
    unkeyed_replays: Mutex<u64>,
    keyed_replays: Mutex<u64>,
}

impl Recorder {
    fn push(&self, at: Duration, outcome: Outcome) {
        self.events
            .lock()
            .expect("events")
            .push(Event { at, outcome });
    }
}

/// Records its attempt as `Lost` if dropped before it was told the outcome (the SDK drops an
/// attempt whose timeout fired).
struct Pending<'a> {
    rec: &'a Recorder,
    at: Duration,
    done: bool,
}

impl Pending<'_> {
    fn finish(mut self, outcome: Outcome) {
        self.done = true;
        self.rec.push(self.at, outcome);
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.rec.push(self.at, Outcome::Lost);
        }
    }
}

/// One request the application makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Get,
    Post,
    PostKeyed,
}

impl Kind {
    fn method(self) -> Method {
        match self {
            Kind::Get => Method::GET,
            Kind::Post | Kind::PostKeyed => Method::POST,
        }
    }
}

/// What one logical request's attempts share: whether the previous attempt may have executed
/// without its response arriving.
struct Attempts<'a> {
    client: &'a HttpClient,
    target: SocketAddr,
    token: &'static str,
    kind: Kind,
    rec: &'a Recorder,
    unanswered: AtomicBool,
}

impl Attempts<'_> {
    async fn send(
        &self,
        key: Option<&str>,
    ) -> Result<Response<()>, hyper_util::client::legacy::Error> {
        // Relaxed: the flag is this logical request's own, read and written by its attempts one
        // after the other on one task.
        if self.unanswered.swap(true, Ordering::Relaxed) && self.kind != Kind::Get {
            let counter = if key.is_some() {
                &self.rec.keyed_replays
            } else {
                &self.rec.unkeyed_replays
            };
            *counter.lock().expect("replays") += 1;
        }
        let mut req = Request::builder()
            .method(self.kind.method())
            .uri(format!("http://{}/v1/items", self.target))
            .header("authorization", format!("Bearer {}", self.token));
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        let req = req.body(Empty::new()).expect("request");
        let pending = Pending {
            rec: self.rec,
            at: self.rec.start.elapsed(),
            done: false,
        };
        match self.client.request(req).await {
            Ok(res) => {
                let (parts, body) = res.into_parts();
                let _ = body.collect().await;
                self.unanswered.store(false, Ordering::Relaxed);
                pending.finish(match parts.status {
                    s if s.is_success() => Outcome::Admitted,
                    StatusCode::TOO_MANY_REQUESTS => Outcome::Throttled,
                    StatusCode::SERVICE_UNAVAILABLE => Outcome::Unavailable,
                    _ => Outcome::Other,
                });
                Ok(Response::from_parts(parts, ()))
            }
            Err(e) => {
                if e.is_connect() {
                    // Never left: nothing executed.
                    self.unanswered.store(false, Ordering::Relaxed);
                }
                pending.finish(Outcome::Lost);
                Err(e)
            }
        }
    }

    /// The careless client: again at once on anything but a 2xx, whatever the method.
    async fn naive(
        &self,
        max_attempts: u32,
        deadline: Duration,
        timeout: Duration,
    ) -> Result<(), GiveUp> {
        let began = Instant::now();
        let key =
            (self.kind == Kind::PostKeyed).then(|| tollgate_client::fastrand::u128(..).to_string());
        for _ in 0..max_attempts {
            if began.elapsed() >= deadline {
                return Err(GiveUp::Deadline {
                    wait: Duration::ZERO,
                });
            }
            match tokio::time::timeout(timeout, self.send(key.as_deref())).await {
                Ok(Ok(res)) if res.status().is_success() => return Ok(()),
                Ok(Ok(res)) if res.status().is_client_error() && !is_refusal(res.status()) => {
                    return Err(GiveUp::NonRetryable)
                }
                _ => tokio::task::yield_now().await,
            }
        }
        Err(GiveUp::Attempts)
    }
}

fn is_refusal(s: StatusCode) -> bool {
    s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::SERVICE_UNAVAILABLE
}

/// Runs one storm; every client sends its first attempt at `start`.
pub async fn run(storm: &Storm, start: Instant) -> Report {
    let mut builder = Client::builder(TokioExecutor::new());
    if storm.fresh_connections {
        builder.pool_max_idle_per_host(0);
    }
    let client: HttpClient = builder.build_http();
    let rec = Arc::new(Recorder {
        start,
        events: Mutex::new(Vec::new()),
        unkeyed_replays: Mutex::new(0),
        keyed_replays: Mutex::new(0),
    });
    let budget = RetryBudget::new(BUDGET_TTL, BUDGET_MIN_PER_SEC, BUDGET_RATIO);
    let stats = Arc::new(ClientStats::new());
    let mut tasks = Vec::with_capacity(storm.clients);
    for i in 0..storm.clients {
        let skew = match storm.wall_skews.len() {
            0 => 0,
            n => storm.wall_skews[i % n],
        };
        let mut policy = RetryPolicy::new();
        if !storm.retry_after_jitter {
            policy = policy.retry_after_jitter(0.0, Duration::ZERO);
        }
        let policy = policy
            .max_attempts(storm.max_attempts)
            .deadline(Some(storm.deadline))
            .attempt_timeout(Some(storm.attempt_timeout))
            .max_wait(storm.deadline)
            .clock(Arc::new(SkewedClock::by_seconds(TokioClock, skew)))
            .stats(stats.clone());
        let (client, rec, budget, storm) =
            (client.clone(), rec.clone(), budget.clone(), storm.clone());
        tasks.push(tokio::spawn(async move {
            let target = storm.targets[i % storm.targets.len()];
            let mut ends = Vec::new();
            let mut next = start;
            for n in 0usize.. {
                tokio::time::sleep_until(next).await;
                let kind = match storm.mix {
                    Mix::Reads => Kind::Get,
                    Mix::ReadsAndWrites => [Kind::Get, Kind::Post, Kind::PostKeyed][(i + n) % 3],
                };
                let attempts = Attempts {
                    client: &client,
                    target,
                    token: storm.token,
                    kind,
                    rec: &rec,
                    unanswered: AtomicBool::new(false),
                };
                let began = start.elapsed();
                let gave_up = if storm.sdk {
                    let mut call = Call::new(kind.method());
                    if kind == Kind::PostKeyed {
                        call = call.generate_idempotency_key();
                    }
                    let r = execute(&policy, &budget, call, |a| {
                        let attempts = &attempts;
                        async move {
                            attempts
                                .send(a.idempotency_key.as_deref())
                                .await
                                .map_err(|e| {
                                    if e.is_connect() {
                                        TransportError::not_sent(e)
                                    } else {
                                        TransportError::sent_no_response(e)
                                    }
                                })
                        }
                    })
                    .await;
                    r.err().map(|e| e.reason.as_str())
                } else {
                    attempts
                        .naive(storm.max_attempts, storm.deadline, storm.attempt_timeout)
                        .await
                        .err()
                        .map(|reason| reason.as_str())
                };
                ends.push(Logical {
                    began,
                    ended: start.elapsed(),
                    gave_up,
                });
                match storm.run_for {
                    Some(d) if start.elapsed() < d => {
                        let gap = storm.period.mul_f64(0.5 + tollgate_client::fastrand::f64());
                        next = (next + gap).max(Instant::now());
                    }
                    _ => break,
                }
            }
            ends
        }));
    }
    let mut logical = Vec::new();
    for t in tasks {
        logical.extend(t.await.expect("client task"));
    }
    let elapsed = start.elapsed();
    let events = std::mem::take(&mut *rec.events.lock().expect("events"));
    let unkeyed_replays = *rec.unkeyed_replays.lock().expect("replays");
    let keyed_replays = *rec.keyed_replays.lock().expect("replays");
    Report {
        events,
        logical,
        unkeyed_replays,
        keyed_replays,
        retry_after_invalid: stats.snapshot().retry_after_invalid,
        recovery_at: storm.recovery_at,
        elapsed,
    }
}
