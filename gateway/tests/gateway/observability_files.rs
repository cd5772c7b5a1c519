//! `examples/observability/dashboard.json` (Grafana) and `alerts.yaml` (Prometheus rules) query
//! only metrics that exist: every `tollgate*` name in their expressions is either recorded by
//! the rule file itself, or appears in the demo gateway's `/metrics` (the router of
//! `tollgate_gateway::app`, with the gateway's Prometheus configuration, after traffic), or
//! for `tollgate_client_*` in what the client SDK recorded while it called that gateway.
//! The files' shape is checked too: the dashboard has the panels operators need, every rule is
//! an alert or a recording rule with an expression, and every alert has a severity and a
//! summary.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tollgate::quanta::Clock;
use tollgate::{Limiter, Profile};
use tollgate_client::{ManualClock, RetryBudget, RetryLayer, RetryPolicy, PRODUCT_TOKEN};
use tower::{service_fn, Layer, Service, ServiceExt};

use tollgate_gateway::app;

const DASHBOARD: &str = include_str!("../../../examples/observability/dashboard.json");
const ALERTS: &str = include_str!("../../../examples/observability/alerts.yaml");

fn profile() -> Profile {
    Profile::from_yaml(&format!(
        r#"
name: observability-test
identities: {{ capacity: 256 }}
route_classes:
  read:
    burst:     {{ tokens: 3, per: 1s }}
    sustained: {{ tokens: 1000, per: 1h }}
shared_capacity:
  shards: 1
  window: 1s
  slots_per_window: 1000
  tenant_share: 1
  tenants:
    acme: {{ weight: 1 }}
routes:
  - {{ method: GET, path: "/v1/**", class: read }}
error_budget: {{ capacity_rejections: 0.01, window: 1m }}
observability:
  sdk_versions: [{PRODUCT_TOKEN}, curl]
"#
    ))
    .unwrap()
}

/// The metric names of a Prometheus text exposition.
fn exposed(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let end = l.find(['{', ' ']).unwrap_or(l.len());
            l[..end].to_owned()
        })
        .collect()
}

/// The value of the sample of `name` whose labels contain every one of `labels` (as
/// `key="value"`), summed over such samples.
fn sample(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Every metric name (a PromQL identifier starting with `tollgate`) in an expression: what
/// is neither a function, a keyword nor a label (no label of tollgate's starts so).
fn names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut ident = String::new();
    let mut in_string = false;
    for c in expr.chars().chain([' ']) {
        if c == '"' {
            in_string = !in_string;
        }
        if !in_string && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            ident.push(c);
            continue;
        }
        if ident.starts_with("tollgate") {
            out.insert(core::mem::take(&mut ident));
        }
        ident.clear();
    }
    out
}

/// Every `expr` string anywhere in the dashboard.
fn dashboard_exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

/// What the gateway exposes and what the SDK recorded, after the SDK called the gateway
/// (through its retry layer, with its product token) and an authenticated tenant did too.
async fn traffic() -> (String, String) {
    let gateway = app::prometheus().build_recorder();
    let gateway_handle = gateway.handle();
    let client = app::prometheus().build_recorder();
    let client_handle = client.handle();
    // The SDK's metrics go to the test thread's recorder (a current-thread runtime keeps every
    // task on it); the gateway registers its handles with its own when it is built.
    let _client_metrics = metrics::set_default_local_recorder(&client);
    let (clock, _mock) = Clock::mock(); // the gateway's clock stands still: its refusals are exact
    let router = metrics::with_local_recorder(&gateway, || {
        let limiter = Limiter::builder(profile())
            .clock(clock)
            .per_tenant_metrics(true)
            .build()
            .unwrap();
        let tokens = app::Tokens::from_yaml(
            "tokens:\n  acme-token-0123456789: { tenant: acme, principal: alice }\n",
        )
        .unwrap();
        app::router(Arc::new(limiter), tokens, Vec::new())
    });
    let peer = ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000)));
    let gateway_svc = {
        let router = router.clone();
        service_fn(move |req: Request<String>| {
            let mut req = req.map(Body::from);
            req.extensions_mut().insert(peer);
            router.clone().oneshot(req)
        })
    };
    let wait_clock = ManualClock::default();
    let policy = RetryPolicy::new()
        .clock(Arc::new(wait_clock.clone()))
        .rng(fastrand::Rng::with_seed(15));
    let budget = RetryBudget::with_clock(
        Duration::from_secs(10),
        100,
        0.5,
        Arc::new(wait_clock.clone()),
    );
    let mut sdk = RetryLayer::new(policy, budget).layer(gateway_svc);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let req = Request::get("http://gateway.test/v1/items")
            .body(String::new())
            .unwrap();
        std::future::poll_fn(|cx| sdk.poll_ready(cx)).await.unwrap();
        let res: Response<Body> = sdk.call(req).await.unwrap();
        statuses.push(res.status().as_u16());
    }
    // Burst 3 from one address: 3 served; the next two retried on Retry-After, then given up.
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    // A server (not tollgate) that sends a Retry-After the SDK cannot parse: the SDK counts it
    // and backs off on its own.
    let odd = service_fn(|_req: Request<String>| async {
        let res = Response::builder()
            .status(503)
            .header("retry-after", "soon")
            .body(Body::empty())
            .unwrap();
        Ok::<_, Infallible>(res)
    });
    let policy = RetryPolicy::new()
        .clock(Arc::new(wait_clock.clone()))
        .max_attempts(2);
    let budget = RetryBudget::with_clock(Duration::from_secs(10), 100, 0.5, Arc::new(wait_clock));
    let mut odd = RetryLayer::new(policy, budget).layer(odd);
    let req = Request::get("http://elsewhere.test/")
        .body(String::new())
        .unwrap();
    std::future::poll_fn(|cx| odd.poll_ready(cx)).await.unwrap();
    assert_eq!(odd.call(req).await.unwrap().status(), 503);

    let mut req = Request::get("/v1/items")
        .header("authorization", "Bearer acme-token-0123456789")
        .header("user-agent", "curl/8.5.0")
        .body(Body::empty())
        .unwrap();
    req.extensions_mut().insert(peer);
    assert_eq!(router.oneshot(req).await.unwrap().status(), StatusCode::OK);

    // The gateway's own route serves the exposition.
    let res = app::operator_router(gateway_handle)
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let gateway_text = String::from_utf8(body.to_vec()).unwrap();
    (gateway_text, client_handle.render())
}

#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_query_is_exposed() {
    let (gateway, client) = traffic().await;
    // The traffic reached every family the files query (not only their registration).
    let token = format!("sdk=\"{PRODUCT_TOKEN}\"");
    let g = |name: &str, labels: &[&str]| sample(&gateway, name, labels);
    assert!(g("tollgate_decisions_total", &["outcome=\"throttled\""]) > 0.0);
    assert!(g("tollgate_near_limit_total", &["route_class=\"read\""]) > 0.0);
    assert!(
        g(
            "tollgate_sdk_decisions_total",
            &[&token, "outcome=\"throttled\""]
        ) > 0.0
    );
    assert_eq!(g("tollgate_sdk_decisions_total", &["sdk=\"curl\""]), 1.0);
    assert_eq!(
        g("tollgate_tenant_decisions_total", &["tenant=\"acme\""]),
        1.0
    );
    assert!(g("tollgate_retry_after_seconds_count", &[]) > 0.0);
    let c = |name: &str, labels: &[&str]| sample(&client, name, labels);
    assert_eq!(c("tollgate_client_requests_total", &[]), 6.0);
    assert!(c("tollgate_client_attempts_total", &[]) > 5.0);
    assert_eq!(c("tollgate_client_success_total", &[]), 3.0);
    assert_eq!(c("tollgate_client_abandoned_total", &[]), 3.0);
    assert!(c("tollgate_client_retry_after_invalid_total", &[]) > 0.0);
    assert!(c("tollgate_client_wait_seconds_count", &[]) > 0.0);

    let gateway_names = exposed(&gateway);
    let client_names = exposed(&client);
    let alerts: serde_yaml_ng::Value = serde_yaml_ng::from_str(ALERTS).unwrap();
    let mut recorded = BTreeSet::new();
    let mut exprs: Vec<(String, String)> = Vec::new();
    let groups = alerts["groups"].as_sequence().expect("groups");
    assert!(!groups.is_empty());
    for group in groups {
        assert!(group["name"].is_string(), "{group:?}");
        for rule in group["rules"].as_sequence().expect("rules") {
            let expr = rule["expr"].as_str().expect("every rule has an expr");
            match (rule["alert"].as_str(), rule["record"].as_str()) {
                (Some(alert), None) => {
                    assert!(rule["for"].is_string(), "{alert}: for");
                    assert!(
                        matches!(rule["labels"]["severity"].as_str(), Some("page" | "ticket")),
                        "{alert}: severity"
                    );
                    assert!(rule["annotations"]["summary"].is_string(), "{alert}");
                    exprs.push((format!("alert {alert}"), expr.to_owned()));
                }
                (None, Some(record)) => {
                    recorded.insert(record.to_owned());
                    exprs.push((format!("record {record}"), expr.to_owned()));
                }
                _ => panic!("a rule is an alert or a recording rule: {rule:?}"),
            }
        }
    }
    assert!(
        exprs
            .iter()
            .any(|(_, e)| e.contains("tollgate_error_budget_exceeded")),
        "the engine's own error-budget alert"
    );
    let dashboard: Value = serde_json::from_str(DASHBOARD).unwrap();
    let mut panel_exprs = Vec::new();
    dashboard_exprs(&dashboard, &mut panel_exprs);
    assert!(panel_exprs.len() >= 10);
    exprs.extend(panel_exprs.into_iter().map(|e| ("dashboard".to_owned(), e)));

    let mut checked = BTreeSet::new();
    for (whose, expr) in &exprs {
        let found = names(expr);
        assert!(!found.is_empty(), "{whose}: no tollgate metric in {expr}");
        for name in found {
            let ok = if recorded.contains(&name) {
                true
            } else if name.starts_with("tollgate_client_") {
                client_names.contains(&name)
            } else {
                gateway_names.contains(&name)
            };
            assert!(
                ok,
                "{whose} queries {name}, which is not exposed.\ngateway: {gateway_names:?}\n\
                 client: {client_names:?}"
            );
            checked.insert(name);
        }
    }
    // The families operators need are all queried.
    for family in [
        "tollgate_decisions_total",
        "tollgate_tenant_decisions_total",
        "tollgate_sdk_decisions_total",
        "tollgate_near_limit_total",
        "tollgate_retry_after_seconds_bucket",
        "tollgate_client_wait_seconds_sum",
        "tollgate_client_attempts_total",
        "tollgate_client_requests_total",
        "tollgate_client_success_total",
        "tollgate_client_abandoned_total",
        "tollgate_capacity_rejection_ratio",
        "tollgate_error_budget_exceeded",
    ] {
        assert!(checked.contains(family), "{family} is not queried");
    }
}

#[test]
fn the_dashboard_has_the_panels_seed_002_names() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).unwrap();
    let titles: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
        .map(|p| p["title"].as_str().unwrap().to_lowercase())
        .collect();
    for wanted in [
        "limit hits by dimension",
        "429s",
        "retry-after distribution",
        "client waits",
        "retry amplification",
        "eventual success",
        "abandonment",
        "near the limit",
        "sdk version",
        "error budget",
    ] {
        assert!(
            titles.iter().any(|t| t.contains(wanted)),
            "no panel for {wanted}: {titles:?}"
        );
    }
    // Every panel reads the data source chosen at import.
    for p in dashboard["panels"].as_array().unwrap() {
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
}

#[test]
fn names_are_read_from_expressions() {
    let n = names(
        "sum by (le) (rate(tollgate_retry_after_seconds_bucket{route_class=\"tollgate_x\"}[5m])) \
         / tollgate:ratio:rate5m",
    );
    assert_eq!(
        n,
        BTreeSet::from([
            "tollgate:ratio:rate5m".to_owned(),
            "tollgate_retry_after_seconds_bucket".to_owned()
        ])
    );
}
