//! Reading what a `metrics-util` debugging recorder collected, for tests of both backends'
//! telemetry.

use metrics_util::debugging::{DebugValue, Snapshotter};

/// Every metric the recorder holds: (name, its labels as sorted `key=value`, value: a
/// counter's count, a gauge's value, a histogram's number of samples).
pub fn snapshot(s: &Snapshotter) -> Vec<(String, Vec<String>, f64)> {
    s.snapshot()
        .into_vec()
        .into_iter()
        .map(|(k, _, _, v)| {
            let key = k.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let v = match v {
                DebugValue::Counter(c) => c as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(h) => h.len() as f64,
            };
            (key.name().to_owned(), labels, v)
        })
        .collect()
}

/// The sum of the values of metric `name` over the series that carry every label of `labels`
/// (each `key=value`).
pub fn value(snap: &[(String, Vec<String>, f64)], name: &str, labels: &[&str]) -> f64 {
    snap.iter()
        .filter(|(n, l, _)| n == name && labels.iter().all(|want| l.iter().any(|x| x == want)))
        .map(|(_, _, v)| *v)
        .sum()
}
