//! `tollgate_sdk_decisions_total{sdk, outcome}`: the tower layer's decisions by client SDK,
//! bounded to the profile's `observability.sdk_versions` plus `other` and `none`, and off
//! (no series, `User-Agent` unread) when the profile lists none.
#![cfg(feature = "metrics")]

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use metrics_util::debugging::{DebuggingRecorder, Snapshotter};
use tollgate::tower::RateLimitLayer;
use tollgate::{Limiter, Profile};
use tollgate_testkit::metrics::{snapshot, value};
use tower::{service_fn, Layer, ServiceExt};

fn profile(observability: &str, burst: u32) -> Profile {
    Profile::from_yaml(&format!(
        r#"
name: sdk-test
identities: {{ capacity: 64 }}
{observability}
route_classes:
  read:
    burst:     {{ tokens: {burst}, per: 1s }}
    sustained: {{ tokens: 1000000, per: 1h }}
routes:
  - {{ method: GET, path: "/v1/**", class: read }}
"#
    ))
    .unwrap()
}

const LISTED: &str =
    "observability:\n  sdk_versions: [tollgate-client/0.1.0, tollgate-client/0.2.0, curl]";

type Svc = tower::util::BoxCloneService<Request<String>, Response<Vec<u8>>, Infallible>;

/// The layer over a plain service, its counters registered with a recorder of the test's own.
fn service(profile: Profile) -> (Svc, Snapshotter) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let svc = metrics::with_local_recorder(&recorder, || {
        let limiter = Arc::new(Limiter::builder(profile).build().unwrap());
        let inner = service_fn(|_req: Request<String>| async {
            Ok::<_, Infallible>(Response::new(vec![]))
        });
        tower::util::BoxCloneService::new(RateLimitLayer::new(limiter).layer(inner))
    });
    (svc, snapshotter)
}

async fn get(svc: &Svc, user_agent: Option<&[u8]>) -> u16 {
    let mut r = Request::get("/v1/items");
    if let Some(ua) = user_agent {
        r = r.header("user-agent", ua);
    }
    let mut r = r.body(String::new()).unwrap();
    r.extensions_mut()
        .insert(SocketAddr::from(([192, 0, 2, 1], 5555)));
    svc.clone().oneshot(r).await.unwrap().status().as_u16()
}

/// The distinct `sdk` label values in a snapshot of the SDK counter.
fn sdk_labels(snap: &[(String, Vec<String>, f64)]) -> BTreeSet<String> {
    snap.iter()
        .filter(|(n, _, _)| n == "tollgate_sdk_decisions_total")
        .flat_map(|(_, labels, _)| labels.iter())
        .filter_map(|l| l.strip_prefix("sdk=").map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn decisions_are_counted_by_listed_version_other_and_none() {
    let (svc, snapshotter) = service(profile(LISTED, 4));
    let uas: [Option<&[u8]>; 6] = [
        Some(b"tollgate-client/0.1.0"),
        Some(b"billing-sync/3.2 (linux) tollgate-client/0.2.0"),
        Some(b"curl/8.5.0"),
        Some(b"tollgate-client/0.3.0"), // an unknown version: other
        Some(b"Mozilla/5.0 (X11; Linux x86_64)"),
        None,
    ];
    for ua in uas {
        get(&svc, ua).await;
    }
    // Burst 4 from one address: the last two were throttled.
    let snap = snapshot(&snapshotter);
    let n = |labels: &[&str]| value(&snap, "tollgate_sdk_decisions_total", labels);
    assert_eq!(n(&["sdk=tollgate-client/0.1.0", "outcome=admitted"]), 1.0);
    assert_eq!(n(&["sdk=tollgate-client/0.2.0", "outcome=admitted"]), 1.0);
    assert_eq!(n(&["sdk=curl", "outcome=admitted"]), 1.0);
    assert_eq!(n(&["sdk=other", "outcome=admitted"]), 1.0);
    assert_eq!(n(&["sdk=other", "outcome=throttled"]), 1.0);
    assert_eq!(n(&["sdk=none", "outcome=throttled"]), 1.0);
    assert_eq!(n(&["sdk=none", "outcome=admitted"]), 0.0);
    assert_eq!(n(&[]), 6.0, "every decision counted once");
}

#[tokio::test]
async fn ten_thousand_user_agents_make_at_most_the_listed_labels_other_and_none() {
    let (svc, snapshotter) = service(profile(LISTED, 1_000_000));
    let mut rng = fastrand::Rng::with_seed(15);
    for i in 0..10_000u32 {
        let ua: Vec<u8> = match i % 4 {
            0 => format!("tollgate-client/0.{i}.0").into_bytes(),
            1 => format!("client-{i}/{i} (build {i})").into_bytes(),
            // Arbitrary bytes, non-UTF-8 included (what a header value may carry).
            2 => (0..rng.usize(1..200))
                .map(|_| rng.u8(0x20..=0xff))
                .filter(|&b| b != 0x7f)
                .collect(),
            _ => format!("{} curl/{i}", "x".repeat((i % 700) as usize)).into_bytes(),
        };
        assert_eq!(get(&svc, Some(&ua)).await, 200);
    }
    get(&svc, None).await;
    let snap = snapshot(&snapshotter);
    let labels = sdk_labels(&snap);
    let allowed: BTreeSet<String> = [
        "tollgate-client/0.1.0",
        "tollgate-client/0.2.0",
        "curl",
        "other",
        "none",
    ]
    .map(String::from)
    .into();
    assert!(labels.is_subset(&allowed), "{labels:?}");
    assert!(labels.len() <= 5);
    assert_eq!(
        value(&snap, "tollgate_sdk_decisions_total", &[]),
        10_001.0,
        "every decision counted once"
    );
    // The `tollgate-client` versions sent (0.0.0, 0.4.0, 0.8.0, ...) are none of the listed.
    assert_eq!(
        value(
            &snap,
            "tollgate_sdk_decisions_total",
            &["sdk=tollgate-client/0.1.0"]
        ),
        0.0
    );
    assert!(value(&snap, "tollgate_sdk_decisions_total", &["sdk=curl"]) > 0.0);
}

#[tokio::test]
async fn without_listed_versions_there_is_no_sdk_series() {
    let (svc, snapshotter) = service(profile("", 4));
    get(&svc, Some(b"tollgate-client/0.1.0")).await;
    get(&svc, None).await;
    let snap = snapshot(&snapshotter);
    assert!(sdk_labels(&snap).is_empty(), "{snap:?}");
    assert_eq!(value(&snap, "tollgate_decisions_total", &[]), 2.0);
}
