//! A retry storm against the demo gateway on loopback: many clients start together on one
//! identity, with and without the client SDK. Shared by `examples/storm/main.rs` and
//! `tests/http/retry_storm.rs` (whose binary includes this file with `#[path]`).
//!
//! The naive client does what a careless caller does: on 429 or 503 it sends again at once,
//! up to a fixed number of attempts. The SDK client uses `tollgate_client::execute`: it waits
//! the server's Retry-After (jitter only on top), spends a retry budget shared by all its
//! tasks, and gives up at its deadline with a reason.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::{Limiter, Profile};
use tollgate_client::{execute, Call, GiveUp, RetryBudget, RetryPolicy, TransportError};

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

/// Serves the gateway's router on `127.0.0.1:0`; returns its address.
pub async fn start_gateway(profile: Profile) -> SocketAddr {
    let limiter = Arc::new(Limiter::builder(profile).build().expect("limiter"));
    let tokens = crate::app::Tokens::from_yaml(include_str!("../tokens.yaml")).expect("tokens");
    let router = crate::app::router(limiter, tokens, Vec::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve")
    });
    addr
}

/// One storm.
#[derive(Clone, Copy, Debug)]
pub struct Storm {
    /// Concurrent clients, started together, one logical request each.
    pub clients: usize,
    /// Use the SDK (`execute` with a shared budget) or retry at once.
    pub sdk: bool,
    /// The naive client's attempt limit, and the SDK's.
    pub max_attempts: u32,
    /// The SDK's deadline per logical request; the naive client's time limit.
    pub deadline: Duration,
}

/// What a storm did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Logical requests.
    pub logical: u64,
    /// Logical requests that ended in a 2xx.
    pub succeeded: u64,
    /// Responses with status 429.
    pub throttled: u64,
    /// Responses with status 503.
    pub unavailable: u64,
    /// Attempts sent.
    pub attempts: u64,
    /// Gave up, by reason.
    pub abandoned: Vec<(&'static str, u64)>,
    /// From the start until the last successful request completed.
    pub time_to_recover: Duration,
    /// From the start until every client finished.
    pub elapsed: Duration,
}

impl Report {
    /// Attempts per logical request.
    pub fn amplification(&self) -> f64 {
        self.attempts as f64 / self.logical.max(1) as f64
    }
    /// Share of logical requests that eventually succeeded.
    pub fn success(&self) -> f64 {
        self.succeeded as f64 / self.logical.max(1) as f64
    }
}

struct Counts {
    throttled: AtomicU64,
    unavailable: AtomicU64,
    attempts: AtomicU64,
    last_success_ns: AtomicU64,
}

async fn send(
    client: &HttpClient,
    addr: SocketAddr,
    counts: &Counts,
) -> Result<Response<()>, hyper_util::client::legacy::Error> {
    let req = Request::builder()
        .method(Method::GET)
        .uri(format!("http://{addr}/v1/items"))
        .header("authorization", "Bearer acme-alice-token")
        .body(Empty::new())
        .expect("request");
    counts.attempts.fetch_add(1, Ordering::Relaxed);
    let res = client.request(req).await?;
    let (parts, body) = res.into_parts();
    let _ = body.collect().await;
    match parts.status {
        StatusCode::TOO_MANY_REQUESTS => counts.throttled.fetch_add(1, Ordering::Relaxed),
        StatusCode::SERVICE_UNAVAILABLE => counts.unavailable.fetch_add(1, Ordering::Relaxed),
        _ => 0,
    };
    Ok(Response::from_parts(parts, ()))
}

/// Runs one storm against the gateway at `addr`.
pub async fn run(addr: SocketAddr, storm: Storm) -> Report {
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let counts = Arc::new(Counts {
        throttled: AtomicU64::new(0),
        unavailable: AtomicU64::new(0),
        attempts: AtomicU64::new(0),
        last_success_ns: AtomicU64::new(0),
    });
    let policy = Arc::new(
        RetryPolicy::new()
            .max_attempts(storm.max_attempts)
            .deadline(Some(storm.deadline))
            .max_wait(storm.deadline),
    );
    // One budget for the whole client: Finagle's defaults (10 s, 10 a second, 20%).
    let budget = RetryBudget::default();
    let start_line = Arc::new(tokio::sync::Barrier::new(storm.clients));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(storm.clients);
    for _ in 0..storm.clients {
        let (client, counts, policy, budget, start_line) = (
            client.clone(),
            counts.clone(),
            policy.clone(),
            budget.clone(),
            start_line.clone(),
        );
        tasks.push(tokio::spawn(async move {
            start_line.wait().await;
            let ok = if storm.sdk {
                let r = execute(&policy, &budget, Call::new(Method::GET), |_attempt| {
                    let (client, counts) = (client.clone(), counts.clone());
                    async move {
                        send(&client, addr, &counts)
                            .await
                            .map_err(TransportError::not_sent)
                    }
                })
                .await;
                match r {
                    Ok(_) => Ok(()),
                    Err(e) => Err(e.reason),
                }
            } else {
                let mut outcome = Err(GiveUp::Attempts);
                for _ in 0..storm.max_attempts {
                    if start.elapsed() > storm.deadline {
                        outcome = Err(GiveUp::Deadline {
                            wait: Duration::ZERO,
                        });
                        break;
                    }
                    match send(&client, addr, &counts).await {
                        Ok(res) if res.status().is_success() => {
                            outcome = Ok(());
                            break;
                        }
                        _ => tokio::task::yield_now().await,
                    }
                }
                outcome
            };
            if ok.is_ok() {
                counts
                    .last_success_ns
                    .fetch_max(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            ok
        }));
    }
    let mut report = Report {
        logical: storm.clients as u64,
        ..Report::default()
    };
    let mut reasons: Vec<(&'static str, u64)> = Vec::new();
    for t in tasks {
        match t.await.expect("client task") {
            Ok(()) => report.succeeded += 1,
            Err(reason) => match reasons.iter_mut().find(|(r, _)| *r == reason.as_str()) {
                Some((_, n)) => *n += 1,
                None => reasons.push((reason.as_str(), 1)),
            },
        }
    }
    report.elapsed = start.elapsed();
    report.abandoned = reasons;
    report.throttled = counts.throttled.load(Ordering::Relaxed);
    report.unavailable = counts.unavailable.load(Ordering::Relaxed);
    report.attempts = counts.attempts.load(Ordering::Relaxed);
    report.time_to_recover = Duration::from_nanos(counts.last_success_ns.load(Ordering::Relaxed));
    report
}

/// The table `examples/storm` prints.
pub fn table(rows: &[(&str, &Report)]) -> String {
    let mut out = String::from(
        "| client | logical | succeeded | 429s | 503s | attempts | amplification | eventual success | abandoned | time to recover |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n",
    );
    for (name, r) in rows {
        let abandoned: Vec<String> = r
            .abandoned
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        out += &format!(
            "| {name} | {} | {} | {} | {} | {} | {:.2} | {:.1}% | {} | {:.2} s |\n",
            r.logical,
            r.succeeded,
            r.throttled,
            r.unavailable,
            r.attempts,
            r.amplification(),
            r.success() * 100.0,
            if abandoned.is_empty() {
                "-".to_owned()
            } else {
                abandoned.join(", ")
            },
            r.time_to_recover.as_secs_f64(),
        );
    }
    out
}
