//! The Redis backend shares the embedded limiter's core: it records the same metrics and
//! publishes the same discovery document for the same profile.

use tollgate_testkit::redis_server;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_util::debugging::DebuggingRecorder;
use redis_server::RedisServer;
use tollgate::observe::BudgetAlert;
use tollgate::profile::Period;
use tollgate::redis::RedisLimiter;
use tollgate::{Key, Limiter, Profile};
use tollgate_testkit::metrics::{snapshot, value};

const PROFILE: &str = "name: m\nidentities: { capacity: 64 }\nstore: { timeout: 5s }\n\
    route_classes:\n  read:\n    burst: { tokens: 2, per: 1h }\n    sustained: { tokens: 1000, per: 1h }\n  \
    quiet:\n    mode: shadow\n    burst: { tokens: 1, per: 1h }\n    sustained: { tokens: 1000, per: 1h }\n\
    shared_capacity:\n  shards: 1\n  window: 1s\n  slots_per_window: 100\n  tenant_share: 0.5\n  \
    tenants:\n    acme: { weight: 1 }\n";

/// A runtime on this thread, so that handles registered while connecting reach the local
/// recorder.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn redis_decisions_are_counted_like_the_embedded_ones() {
    let mut server = RedisServer::start();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let rt = runtime();
    let limiter = metrics::with_local_recorder(&recorder, || {
        rt.block_on(
            RedisLimiter::builder(&server.url(), Profile::from_yaml(PROFILE).unwrap())
                .key_secret(b"m")
                .per_tenant_metrics(true)
                .connect(),
        )
        .unwrap()
    });
    let read = limiter.route_class("read").unwrap();
    let quiet = limiter.route_class("quiet").unwrap();
    let alice = Key::authenticated("acme", "alice", read).unwrap();
    let bob = Key::authenticated("globex", "bob", quiet).unwrap();
    rt.block_on(async {
        for _ in 0..3 {
            limiter.admit(&alice).await;
        }
        // A peek decides nothing and counts nothing.
        limiter.peek(&alice).await;
        // Shadow mode: both admitted, the second counted as the throttle it would have been.
        assert!(limiter.admit(&bob).await.is_admit());
        assert!(limiter.admit(&bob).await.is_admit());
    });

    let snap = snapshot(&snapshotter);
    let decisions = |labels: &[&str]| value(&snap, "tollgate_decisions_total", labels);
    assert_eq!(
        decisions(&["outcome=admitted", "route_class=read", "mode=enforce"]),
        2.0
    );
    assert_eq!(
        decisions(&["outcome=throttled", "cause=burst", "route_class=read"]),
        1.0
    );
    assert_eq!(
        decisions(&[
            "outcome=throttled",
            "cause=burst",
            "route_class=quiet",
            "mode=shadow"
        ]),
        1.0
    );
    assert_eq!(decisions(&[]), 5.0, "{snap:?}");
    assert_eq!(
        value(&snap, "tollgate_retry_after_seconds", &["route_class=read"]),
        1.0
    );
    let tenant = |labels: &[&str]| value(&snap, "tollgate_tenant_decisions_total", labels);
    assert_eq!(tenant(&["tenant=acme", "outcome=admitted"]), 2.0);
    assert_eq!(tenant(&["tenant=acme", "outcome=throttled"]), 1.0);
    assert_eq!(tenant(&["tenant=other", "outcome=admitted"]), 1.0);

    // A store that is gone fails closed, and that is counted too.
    server.kill();
    let carol = Key::authenticated("acme", "carol", read).unwrap();
    assert!(!rt.block_on(limiter.admit(&carol)).is_admit());
    let snap = snapshot(&snapshotter);
    assert_eq!(
        value(
            &snap,
            "tollgate_decisions_total",
            &[
                "outcome=unavailable",
                "cause=store_unavailable",
                "route_class=read"
            ]
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_publishes_the_embedded_limiters_limits() {
    let server = RedisServer::start();
    let example = || Profile::from_path("examples/profiles/example.yaml").unwrap();
    let embedded = Limiter::builder(example()).build().unwrap();
    let redis = RedisLimiter::builder(&server.url(), example())
        .key_secret(b"p")
        .connect()
        .await
        .unwrap();
    assert_eq!(redis.published_limits(), embedded.published_limits());
    assert!(redis.published_limits().shared_capacity.is_some());
    assert_eq!(
        serde_json::to_string(&redis.published_limits()).unwrap(),
        serde_json::to_string(&embedded.published_limits()).unwrap()
    );

    // A reload changes both alike: a new class is appended, the cap changes.
    let text = std::fs::read_to_string("examples/profiles/example.yaml").unwrap();
    let text = text.replace("max: 1h", "max: 1m").replace(
        "  expensive:\n",
        "  bulk:\n    burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 10, per: 1h }\n  expensive:\n",
    );
    let reloaded = || Profile::from_yaml(&text).unwrap();
    embedded.reload(reloaded()).unwrap();
    redis.reload(reloaded()).unwrap();
    let published = redis.published_limits();
    assert_eq!(published, embedded.published_limits());
    assert_eq!(published.retry_after_max, Period::from_secs(60).unwrap());
    assert_eq!(published.route_classes.last().unwrap().name, "bulk");
}

#[test]
fn redis_capacity_refusals_raise_the_error_budget_alert() {
    let server = RedisServer::start();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let alerts: Arc<Mutex<Vec<BudgetAlert>>> = Arc::default();
    let seen = alerts.clone();
    // Tenants may hold 2 of the shard's 4 slots per (long) window; the budget is 20% of
    // decisions over 1s, evaluated every 100ms on the worker's clock.
    let profile = "name: b\nidentities: { capacity: 64 }\nstore: { timeout: 5s }\n\
        route_classes:\n  read:\n    burst: { tokens: 100, per: 1s }\n    sustained: { tokens: 1000, per: 1h }\n\
        shared_capacity:\n  shards: 1\n  window: 1h\n  slots_per_window: 4\n  tenant_share: 0.5\n\
        error_budget:\n  capacity_rejections: 0.2\n  window: 1s\n";
    let rt = runtime();
    let limiter = metrics::with_local_recorder(&recorder, || {
        rt.block_on(
            RedisLimiter::builder(&server.url(), Profile::from_yaml(profile).unwrap())
                .key_secret(b"b")
                .on_error_budget(move |a| seen.lock().unwrap().push(*a))
                .connect(),
        )
        .unwrap()
    });
    let read = limiter.route_class("read").unwrap();
    let key = Key::authenticated("acme", "alice", read).unwrap();
    rt.block_on(async {
        for _ in 0..6 {
            limiter.admit(&key).await;
        }
        // The first decision of a later sub-window evaluates the ones before it.
        tokio::time::sleep(Duration::from_millis(250)).await;
        limiter.admit(&key).await;
    });
    let alerts = alerts.lock().unwrap();
    let alert = alerts.first().expect("an alert");
    assert!(alert.exceeded && alert.ratio > 0.2, "{alert:?}");
    assert_eq!(alert.window, Duration::from_secs(1));
    assert_eq!(
        value(
            &snapshot(&snapshotter),
            "tollgate_error_budget_exceeded",
            &[]
        ),
        1.0
    );
}

/// The store's own series: a round trip per answered call, errors by kind, deny-cache hits.
#[test]
fn store_round_trips_errors_and_deny_hits_are_recorded() {
    let mut server = RedisServer::start();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let rt = runtime();
    let profile = "name: s\nidentities: { capacity: 64 }\nstore: { timeout: 300ms }\n\
        route_classes:\n  w:\n    burst: { tokens: 1, per: 1h }\n    sustained: { tokens: 100, per: 1h }\n";
    let limiter = metrics::with_local_recorder(&recorder, || {
        rt.block_on(
            RedisLimiter::builder(&server.url(), Profile::from_yaml(profile).unwrap())
                .key_secret(b"s")
                .deny_cache(16)
                .connect(),
        )
        .unwrap()
    });
    let w = limiter.route_class("w").unwrap();
    let alice = Key::authenticated("acme", "alice", w).unwrap();
    rt.block_on(async {
        assert!(limiter.admit(&alice).await.is_admit());
        // Throttled by the server, then twice by the deny cache.
        for _ in 0..3 {
            assert!(!limiter.admit(&alice).await.is_admit());
        }
    });
    let snap = snapshot(&snapshotter);
    assert_eq!(value(&snap, "tollgate_store_round_trip_seconds", &[]), 2.0);
    assert_eq!(value(&snap, "tollgate_deny_cache_hits_total", &[]), 2.0);
    assert_eq!(value(&snap, "tollgate_store_errors_total", &[]), 0.0);

    // A store that answers with an error (the code refused: wrong key type) is a script error.
    let bob = Key::authenticated("acme", "bob", w).unwrap();
    rt.block_on(limiter.admit(&bob));
    for k in server.keys().into_iter().filter(|k| k.contains(":i:")) {
        server.cmd(&["DEL", &k]);
        server.cmd(&["RPUSH", &k, "x"]);
    }
    assert!(!rt.block_on(limiter.admit(&bob)).is_admit());
    let snap = snapshot(&snapshotter);
    assert_eq!(
        value(&snap, "tollgate_store_errors_total", &["kind=script"]),
        1.0
    );
    // (A debugging recorder hands each histogram sample out once: these are the two since.)
    assert_eq!(value(&snap, "tollgate_store_round_trip_seconds", &[]), 2.0);

    // Frozen: no answer within the timeout. Gone: a connection error.
    server.freeze(true);
    let carol = Key::authenticated("acme", "carol", w).unwrap();
    assert!(!rt.block_on(limiter.admit(&carol)).is_admit());
    server.freeze(false);
    let snap = snapshot(&snapshotter);
    assert_eq!(
        value(&snap, "tollgate_store_errors_total", &["kind=timeout"]),
        1.0
    );
    server.kill();
    let dave = Key::authenticated("acme", "dave", w).unwrap();
    assert!(!rt.block_on(limiter.admit(&dave)).is_admit());
    let snap = snapshot(&snapshotter);
    assert_eq!(
        value(&snap, "tollgate_store_errors_total", &["kind=connection"]),
        1.0,
        "{snap:?}"
    );
    // Neither a timeout nor a connection error is a round trip.
    assert_eq!(value(&snap, "tollgate_store_round_trip_seconds", &[]), 0.0);
}

#[test]
fn redis_counts_near_limit_admissions_like_the_embedded_limiter() {
    let server = RedisServer::start();
    // Burst 10 per hour (nothing refills during the test); 0.3 of 10 is 3 tokens.
    let profile = || {
        Profile::from_yaml(
            "name: n\nidentities: { capacity: 64 }\nstore: { timeout: 5s }\n\
             observability: { near_limit: 0.3 }\nroute_classes:\n  read:\n    \
             burst: { tokens: 10, per: 1h }\n    sustained: { tokens: 1000, per: 1h }\n",
        )
        .unwrap()
    };
    let rt = runtime();
    let counts = |admit: &dyn Fn() -> bool, snapshotter: &metrics_util::debugging::Snapshotter| {
        let mut total = 0.0;
        let mut out = Vec::new();
        for _ in 0..11 {
            admit();
            total += value(&snapshot(snapshotter), "tollgate_near_limit_total", &[]);
            out.push(total);
        }
        out
    };
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let redis = metrics::with_local_recorder(&recorder, || {
        rt.block_on(
            RedisLimiter::builder(&server.url(), profile())
                .key_secret(b"n")
                .connect(),
        )
        .unwrap()
    });
    let key = Key::authenticated("acme", "alice", redis.route_class("read").unwrap()).unwrap();
    let from_redis = counts(&|| rt.block_on(redis.admit(&key)).is_admit(), &snapshotter);

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let embedded =
        metrics::with_local_recorder(&recorder, || Limiter::builder(profile()).build().unwrap());
    let key = Key::authenticated("acme", "alice", embedded.route_class("read").unwrap()).unwrap();
    let from_embedded = counts(&|| embedded.admit(&key).is_admit(), &snapshotter);

    // Admissions leaving 2, 1 and 0 tokens (the 8th to the 10th); the 11th is refused.
    let want = [0., 0., 0., 0., 0., 0., 0., 1., 2., 3., 3.];
    assert_eq!(from_embedded, want);
    assert_eq!(from_redis, want);
}

#[test]
fn leases_count_where_decisions_came_from_and_what_went_back() {
    let server = RedisServer::start();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let rt = runtime();
    let profile = "name: l\nidentities: { capacity: 64 }\nstore: { timeout: 5s }\n\
        route_classes:\n  read:\n    burst: { tokens: 100, per: 1h }\n    \
        sustained: { tokens: 1000, per: 1h }\n    lease: { max_tokens: 8, ttl: 1s }\n";
    let limiter = metrics::with_local_recorder(&recorder, || {
        rt.block_on(
            RedisLimiter::builder(&server.url(), Profile::from_yaml(profile).unwrap())
                .key_secret(b"m")
                .connect(),
        )
        .unwrap()
    });
    let key = Key::authenticated("acme", "alice", limiter.route_class("read").unwrap()).unwrap();
    // Leases of 1 and 8: two store decisions, then four spent from the lease; three go back.
    for _ in 0..6 {
        assert!(rt.block_on(limiter.admit(&key)).is_admit());
    }
    assert_eq!(rt.block_on(limiter.return_leases()), 3);
    let snap = snapshot(&snapshotter);
    let decisions = |source: &str| {
        value(
            &snap,
            "tollgate_lease_decisions_total",
            &[&format!("source={source}")],
        )
    };
    assert_eq!((decisions("store"), decisions("lease")), (2.0, 4.0));
    assert_eq!(
        value(
            &snap,
            "tollgate_lease_tokens_returned_total",
            &["reason=shutdown"]
        ),
        3.0
    );
    assert_eq!(
        value(&snap, "tollgate_lease_tokens_stranded_total", &[]),
        0.0
    );
    assert_eq!(
        value(&snap, "tollgate_lease_tokens", &[]),
        2.0,
        "two leases"
    );
}
