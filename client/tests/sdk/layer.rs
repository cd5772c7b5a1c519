//! `RetryLayer` around a scripted tower service, on the manual clock.

use std::future::{pending, poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use tollgate_client::{
    ClientStats, GiveUp, Last, ManualClock, RetryBudget, RetryError, RetryLayer, RetryPolicy,
    SendState, IDEMPOTENCY_KEY,
};
use tower::{Layer, Service};

#[derive(Clone, Copy, Debug)]
enum Step {
    Status(u16),
    Fail(io::ErrorKind),
    Hang,
}

/// Plays the script in order (the last step repeats) and records each request it sees.
#[derive(Clone)]
struct Mock {
    script: Arc<Mutex<Vec<Step>>>,
    seen: Arc<Mutex<Vec<Request<String>>>>,
}

impl Mock {
    fn new(script: &[Step]) -> Self {
        Mock {
            script: Arc::new(Mutex::new(script.to_vec())),
            seen: Arc::default(),
        }
    }

    fn seen(&self) -> Vec<Request<String>> {
        self.seen.lock().unwrap().clone()
    }
}

type MockFuture = Pin<Box<dyn Future<Output = Result<Response<String>, io::Error>> + Send>>;

impl Service<Request<String>> for Mock {
    type Response = Response<String>;
    type Error = io::Error;
    type Future = MockFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<String>) -> MockFuture {
        self.seen.lock().unwrap().push(req);
        let mut s = self.script.lock().unwrap();
        let step = if s.len() > 1 { s.remove(0) } else { s[0] };
        Box::pin(async move {
            match step {
                Step::Status(code) => Ok(Response::builder()
                    .status(code)
                    .body(String::new())
                    .unwrap()),
                Step::Fail(kind) => Err(io::Error::from(kind)),
                Step::Hang => pending().await,
            }
        })
    }
}

fn layer(seed: u64) -> (RetryLayer, ManualClock, Arc<ClientStats>) {
    let clock = ManualClock::default();
    let stats = Arc::new(ClientStats::new());
    let policy = RetryPolicy::new()
        .clock(Arc::new(clock.clone()))
        .rng(fastrand::Rng::with_seed(seed))
        .stats(Arc::clone(&stats))
        .attempt_timeout(Some(Duration::from_secs(2)));
    let budget =
        RetryBudget::with_clock(Duration::from_secs(10), 100, 0.2, Arc::new(clock.clone()));
    (RetryLayer::new(policy, budget), clock, stats)
}

async fn send<S>(svc: &mut S, req: Request<String>) -> Result<S::Response, S::Error>
where
    S: Service<Request<String>>,
{
    poll_fn(|cx| svc.poll_ready(cx)).await?;
    svc.call(req).await
}

fn req(method: Method) -> Request<String> {
    Request::builder()
        .method(method)
        .uri("http://api.test/orders")
        .body("{\"n\":1}".to_owned())
        .unwrap()
}

#[tokio::test]
async fn get_is_retried_and_the_body_replayed() {
    let (layer, clock, stats) = layer(1);
    let mock = Mock::new(&[
        Step::Status(503),
        Step::Fail(io::ErrorKind::ConnectionReset),
        Step::Status(200),
    ]);
    let mut svc = layer.layer(mock.clone());
    let resp = send(&mut svc, req(Method::GET)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.extensions().get::<GiveUp>().is_none());
    let seen = mock.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen
        .iter()
        .all(|r| r.body() == "{\"n\":1}" && r.uri() == "http://api.test/orders"));
    assert_eq!(clock.sleeps().len(), 2);
    assert_eq!(stats.snapshot().successes, 1);
}

#[tokio::test]
async fn final_response_is_returned_with_the_reason() {
    let (layer, _clock, _) = layer(2);
    let mock = Mock::new(&[Step::Status(503)]);
    let mut svc = layer.layer(mock.clone());
    let resp = send(&mut svc, req(Method::POST)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        resp.extensions().get::<GiveUp>(),
        Some(&GiveUp::NonRetryable)
    );
    assert_eq!(mock.seen().len(), 1, "POST without a key is not retried");
    assert!(mock.seen()[0].headers().get(&IDEMPOTENCY_KEY).is_none());

    let mock = Mock::new(&[Step::Status(429)]);
    let mut svc = layer.layer(mock.clone());
    let resp = send(&mut svc, req(Method::GET)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.extensions().get::<GiveUp>(), Some(&GiveUp::Attempts));
    assert_eq!(mock.seen().len(), 4);
}

#[tokio::test]
async fn generated_key_is_the_same_on_every_attempt() {
    let (layer, _clock, _) = layer(3);
    let layer = layer.generate_idempotency_keys(true);
    let mock = Mock::new(&[
        Step::Status(503),
        Step::Fail(io::ErrorKind::TimedOut),
        Step::Status(201),
    ]);
    let mut svc = layer.layer(mock.clone());
    let resp = send(&mut svc, req(Method::POST)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let keys: Vec<_> = mock
        .seen()
        .iter()
        .map(|r| r.headers()[&IDEMPOTENCY_KEY].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| *k == keys[0] && k.len() == 36));

    // The caller's own key is kept as is; GET gets none.
    let mock = Mock::new(&[Step::Status(502), Step::Status(200)]);
    let mut svc = layer.layer(mock.clone());
    let mut r = req(Method::PATCH);
    r.headers_mut()
        .insert(IDEMPOTENCY_KEY, "client-key-7".parse().unwrap());
    send(&mut svc, r).await.unwrap();
    send(&mut svc, req(Method::GET)).await.unwrap();
    let seen = mock.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen[..2]
        .iter()
        .all(|r| r.headers()[&IDEMPOTENCY_KEY] == "client-key-7"));
    assert!(seen[2].headers().get(&IDEMPOTENCY_KEY).is_none());
}

#[tokio::test]
async fn transport_errors_follow_the_send_state() {
    let (layer, _clock, _) = layer(4);
    // Connection refused: never sent, retried even for POST (the default reads io errors).
    let mock = Mock::new(&[
        Step::Fail(io::ErrorKind::ConnectionRefused),
        Step::Status(201),
    ]);
    let mut svc = layer.clone().layer(mock.clone());
    assert_eq!(
        send(&mut svc, req(Method::POST)).await.unwrap().status(),
        201
    );
    assert_eq!(mock.seen().len(), 2);

    // Reset after sending: a POST without a key gets the error back, once.
    let mock = Mock::new(&[Step::Fail(io::ErrorKind::ConnectionReset)]);
    let mut svc = layer.clone().layer(mock.clone());
    let err: RetryError<_, io::Error> = send(&mut svc, req(Method::POST)).await.unwrap_err();
    assert_eq!((err.reason, err.attempts), (GiveUp::NonRetryable, 1));
    assert!(matches!(&err.last, Some(Last::Transport(t)) if t.state == SendState::SentNoResponse));
    assert!(err.to_string().contains("gave up after 1 attempt"), "{err}");

    // A custom reading: everything counts as not sent.
    let layer = layer.send_state(|_: &io::Error| SendState::NotSent);
    let mock = Mock::new(&[
        Step::Fail(io::ErrorKind::ConnectionReset),
        Step::Status(200),
    ]);
    let mut svc = layer.layer(mock.clone());
    assert_eq!(
        send(&mut svc, req(Method::POST)).await.unwrap().status(),
        200
    );
}

#[tokio::test]
async fn hung_attempts_time_out() {
    let (layer, clock, _) = layer(5);
    let mock = Mock::new(&[Step::Hang]);
    let mut svc = layer.layer(mock.clone());
    let err = send(&mut svc, req(Method::POST)).await.unwrap_err();
    assert!(matches!(err.last, Some(Last::TimedOut(d)) if d == Duration::from_secs(2)));
    assert_eq!(err.reason, GiveUp::NonRetryable);
    assert_eq!(clock.elapsed(), Duration::from_secs(2));

    let err = send(&mut svc, req(Method::GET)).await.unwrap_err();
    assert_eq!((err.reason, err.attempts), (GiveUp::Attempts, 4));
}

#[tokio::test]
async fn every_attempt_carries_the_sdk_product_token_after_the_callers_own() {
    let (layer, _clock, _) = layer(7);
    let mock = Mock::new(&[Step::Status(503), Step::Status(200)]);
    let mut svc = layer.clone().layer(mock.clone());
    send(&mut svc, req(Method::GET)).await.unwrap();
    let mut own = req(Method::GET);
    own.headers_mut().insert(
        http::header::USER_AGENT,
        http::HeaderValue::from_static("billing-sync/3.2 (linux)"),
    );
    send(&mut svc, own).await.unwrap();
    let seen: Vec<String> = mock
        .seen()
        .iter()
        .map(|r| r.headers()["user-agent"].to_str().unwrap().to_owned())
        .collect();
    let token = tollgate_client::PRODUCT_TOKEN;
    assert_eq!(
        token,
        concat!("tollgate-client/", env!("CARGO_PKG_VERSION"))
    );
    // Two attempts of the first request (503 then 200), then one of the second.
    let own = format!("billing-sync/3.2 (linux) {token}");
    assert_eq!(seen, [token, token, own.as_str()]);

    let mock = Mock::new(&[Step::Status(200)]);
    let mut svc = layer.product_token(false).layer(mock.clone());
    send(&mut svc, req(Method::GET)).await.unwrap();
    assert!(mock.seen()[0].headers().get("user-agent").is_none());
}
