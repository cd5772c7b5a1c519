//! Operator telemetry: decision counters by outcome, class and cause; the error-budget alert;
//! per-tenant labels only when opted in, and then only for listed tenants.
#![cfg(feature = "metrics")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_util::debugging::DebuggingRecorder;
use tollgate::observe::BudgetAlert;
use tollgate::quanta::Clock;
use tollgate::{Key, Limiter, Outcome, Profile};
use tollgate_testkit::metrics::{snapshot, value};

const PROFILE: &str = "name: m\nidentities: { capacity: 64 }\nroute_classes:\n  read:\n    \
    burst: { tokens: 2, per: 1s }\n    sustained: { tokens: 1000, per: 1h }\nshared_capacity:\n  \
    shards: 1\n  window: 1s\n  slots_per_window: 10\n  tenant_share: 0.5\n  tenants:\n    \
    acme: { weight: 1 }\nerror_budget:\n  capacity_rejections: 0.2\n  window: 10s\n";

#[test]
fn decisions_are_counted_and_the_error_budget_alerts() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let alerts: Arc<Mutex<Vec<BudgetAlert>>> = Arc::default();
    let (clock, mock) = Clock::mock();
    let limiter = metrics::with_local_recorder(&recorder, || {
        let seen = alerts.clone();
        Limiter::builder(Profile::from_yaml(PROFILE).unwrap())
            .clock(clock)
            .key_secret(b"m")
            .on_error_budget(move |a| seen.lock().unwrap().push(*a))
            .build()
            .unwrap()
    });
    let read = limiter.route_class("read").unwrap();
    let k = |p: &'static str| Key::authenticated("acme", p, read).unwrap();
    // Window 1: 2 admitted and 1 throttled for alice, then bob and carol until the share (5)
    // is used: 3 more admitted, then capacity refusals.
    for _ in 0..3 {
        limiter.admit(&k("alice"));
    }
    for p in ["bob", "bob", "carol", "carol", "carol"] {
        limiter.admit(&k(p));
    }
    let snap = snapshot(&snapshotter);
    assert_eq!(
        value(
            &snap,
            "tollgate_decisions_total",
            &["outcome=admitted", "route_class=read", "cause=none"]
        ),
        5.0
    );
    assert_eq!(
        value(
            &snap,
            "tollgate_decisions_total",
            &["outcome=throttled", "cause=burst"]
        ),
        1.0
    );
    assert_eq!(
        value(
            &snap,
            "tollgate_decisions_total",
            &["outcome=unavailable", "cause=tenant_share"]
        ),
        2.0
    );
    assert_eq!(
        value(&snap, "tollgate_retry_after_seconds", &["route_class=read"]),
        3.0
    );
    assert!(
        snap.iter().all(|(_, l, _)| l
            .iter()
            .all(|x| !x.contains("acme") && !x.contains("alice"))),
        "tenant labels without opt-in"
    );
    // 2 refusals of 8 decisions > 0.2: the next sub-window's first decision raises the alert.
    assert!(alerts.lock().unwrap().is_empty());
    mock.increment(Duration::from_secs(1));
    limiter.admit(&k("dave"));
    {
        let a = alerts.lock().unwrap();
        assert_eq!(a.len(), 1, "{a:?}");
        assert!(
            a[0].exceeded && a[0].capacity_rejections == 2 && a[0].decisions == 8,
            "{a:?}"
        );
    }
    assert_eq!(
        value(
            &snapshot(&snapshotter),
            "tollgate_error_budget_exceeded",
            &[]
        ),
        1.0
    );
    // Quiet traffic for the rest of the window: the ratio falls back under the budget.
    for s in 0..12 {
        mock.increment(Duration::from_secs(1));
        for p in ["erin", "frank", "grace"] {
            let _ = s;
            limiter.admit(&k(p));
        }
    }
    let a = alerts.lock().unwrap();
    assert_eq!(a.len(), 2, "{a:?}");
    assert!(!a[1].exceeded);
    assert_eq!(
        value(
            &snapshot(&snapshotter),
            "tollgate_error_budget_exceeded",
            &[]
        ),
        0.0
    );
}

#[test]
fn per_tenant_labels_are_opt_in_and_bounded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let limiter = metrics::with_local_recorder(&recorder, || {
        Limiter::builder(Profile::from_yaml(PROFILE).unwrap())
            .per_tenant_metrics(true)
            .build()
            .unwrap()
    });
    let read = limiter.route_class("read").unwrap();
    for t in ["acme", "initech", "hooli"] {
        limiter.admit(&Key::authenticated(t, "p", read).unwrap());
    }
    limiter.admit(&Key::anonymous("192.0.2.1".parse().unwrap(), read));
    let snap = snapshot(&snapshotter);
    let n = "tollgate_tenant_decisions_total";
    assert_eq!(value(&snap, n, &["tenant=acme", "outcome=admitted"]), 1.0);
    assert_eq!(value(&snap, n, &["tenant=other", "outcome=admitted"]), 2.0);
    assert_eq!(
        value(&snap, n, &["tenant=anonymous", "outcome=admitted"]),
        1.0
    );
    assert!(snap.iter().all(|(_, l, _)| l
        .iter()
        .all(|x| !x.contains("initech") && !x.contains("hooli"))));
}

#[test]
fn every_outcome_has_its_series_per_class_and_mode() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _limiter = metrics::with_local_recorder(&recorder, || {
        Limiter::builder(Profile::from_yaml(PROFILE).unwrap())
            .build()
            .unwrap()
    });
    // Registered at build, before any decision: one series per outcome, named by `Outcome`.
    let snap = snapshot(&snapshotter);
    let series: Vec<&Vec<String>> = snap
        .iter()
        .filter(|(n, _, _)| n == "tollgate_decisions_total")
        .map(|(_, l, _)| l)
        .collect();
    assert_eq!(series.len(), Outcome::COUNT);
    for o in Outcome::ALL {
        let mut want = vec![
            format!("cause={}", o.cause_label()),
            "mode=enforce".to_owned(),
            format!("outcome={}", o.label()),
            "route_class=read".to_owned(),
        ];
        want.sort();
        assert!(series.contains(&&want), "{o:?}: {series:?}");
    }
}
