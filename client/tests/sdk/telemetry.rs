//! The `tollgate_client_*` metrics, through a tiny in-memory `metrics` recorder.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Response};
use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use tollgate_client::{
    execute, Call, ClientStats, ManualClock, RetryBudget, RetryPolicy, TransportError,
};

type Store = Arc<Mutex<BTreeMap<String, Vec<f64>>>>;

/// One metric: every increment or recorded value, keyed by `name{k=v,...}`.
struct Handle {
    key: String,
    store: Store,
}

impl CounterFn for Handle {
    fn increment(&self, value: u64) {
        let mut s = self.store.lock().unwrap();
        s.entry(self.key.clone()).or_default().push(value as f64);
    }

    fn absolute(&self, _value: u64) {
        unreachable!("the client only increments")
    }
}

impl HistogramFn for Handle {
    fn record(&self, value: f64) {
        let mut s = self.store.lock().unwrap();
        s.entry(self.key.clone()).or_default().push(value);
    }
}

#[derive(Default)]
struct Memory {
    store: Store,
}

impl Memory {
    fn handle(&self, key: &Key) -> Arc<Handle> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let key = if labels.is_empty() {
            key.name().to_owned()
        } else {
            format!("{}{{{}}}", key.name(), labels.join(","))
        };
        Arc::new(Handle {
            key,
            store: Arc::clone(&self.store),
        })
    }

    fn values(&self, key: &str) -> Vec<f64> {
        self.store
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    fn sum(&self, key: &str) -> f64 {
        self.values(key).iter().sum()
    }
}

impl Recorder for Memory {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.handle(key))
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.handle(key))
    }
}

type Out = Result<Response<()>, TransportError<std::io::Error>>;

fn resp(status: u16, retry_after: Option<&str>) -> Out {
    let mut b = Response::builder().status(status);
    if let Some(v) = retry_after {
        b = b.header("retry-after", v);
    }
    Ok(b.body(()).unwrap())
}

#[test]
fn metrics_mirror_the_stats() {
    let memory = Memory::default();
    let clock = ManualClock::default();
    let stats = Arc::new(ClientStats::new());
    let policy = RetryPolicy::new()
        .clock(Arc::new(clock.clone()))
        .rng(fastrand::Rng::with_seed(1))
        .stats(Arc::clone(&stats))
        .max_attempts(3)
        .max_wait(Duration::from_secs(60));
    let budget = RetryBudget::with_clock(Duration::from_secs(10), 100, 0.2, Arc::new(clock));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    metrics::with_local_recorder(&memory, || {
        rt.block_on(async {
            // 1: 429 (Retry-After 2) then 200: success after 2 attempts.
            let mut script = vec![resp(429, Some("2")), resp(200, None)].into_iter();
            execute(&policy, &budget, Call::new(Method::GET), |_| {
                std::future::ready(script.next().unwrap())
            })
            .await
            .unwrap();
            // 2: 503 three times, invalid Retry-After: attempts exhausted.
            execute(&policy, &budget, Call::new(Method::GET), |_| {
                std::future::ready(resp(503, Some("later")))
            })
            .await
            .unwrap_err();
            // 3: 404: final at once.
            execute(&policy, &budget, Call::new(Method::GET), |_| {
                std::future::ready(resp(404, None))
            })
            .await
            .unwrap_err();
            // 4: Retry-After above max_wait.
            execute(&policy, &budget, Call::new(Method::GET), |_| {
                std::future::ready(resp(429, Some("3600")))
            })
            .await
            .unwrap_err();
        })
    });

    let st = stats.snapshot();
    assert_eq!(memory.sum("tollgate_client_requests_total"), 4.0);
    assert_eq!(st.requests, 4);
    assert_eq!(memory.sum("tollgate_client_attempts_total"), 7.0);
    assert_eq!(st.attempts, 7);
    assert_eq!(
        memory.values("tollgate_client_amplification"),
        [2.0, 3.0, 1.0, 1.0]
    );
    assert_eq!(memory.sum("tollgate_client_success_total"), 1.0);
    assert_eq!(st.successes, 1);
    assert_eq!(
        memory.sum("tollgate_client_abandoned_total{reason=attempts}"),
        1.0
    );
    assert_eq!(
        memory.sum("tollgate_client_abandoned_total{reason=non_retryable}"),
        1.0
    );
    assert_eq!(
        memory.sum("tollgate_client_abandoned_total{reason=wait_too_long}"),
        1.0
    );
    assert_eq!(
        (
            st.abandoned_attempts,
            st.abandoned_non_retryable,
            st.abandoned_wait_too_long
        ),
        (1, 1, 1)
    );
    let waits = memory.values("tollgate_client_wait_seconds");
    assert_eq!(waits.len(), 3);
    assert_eq!(st.waits, 3);
    assert!((waits.iter().sum::<f64>() - st.wait_total.as_secs_f64()).abs() < 1e-6);
    assert!(waits[0] >= 2.0, "the Retry-After wait comes first");
    assert_eq!(
        memory.values("tollgate_client_retry_after_seconds"),
        [2.0, 3600.0]
    );
    assert_eq!(memory.sum("tollgate_client_retry_after_invalid_total"), 3.0);
    assert_eq!(st.retry_after_invalid, 3);
}
