//! Who owns the layer's state: freed with the last layer and service by default, kept for the
//! process after `RateLimitLayer::leak`; and a reload seen by every clone either way.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Request, Response};
use tollgate::tower::RateLimitLayer;
use tollgate::{Limiter, Profile};
use tower::{service_fn, Layer, ServiceExt};

use super::layer::limiter;

type Inner = tower::util::BoxCloneService<Request<String>, Response<Vec<u8>>, Infallible>;

fn inner() -> Inner {
    Inner::new(service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new(b"ok".to_vec()))
    }))
}

fn get(path: &str) -> Request<String> {
    let mut r = Request::get(path).body(String::new()).unwrap();
    r.extensions_mut()
        .insert(std::net::SocketAddr::from(([192, 0, 2, 9], 1)));
    r
}

async fn policy<S>(svc: S, path: &str) -> Option<String>
where
    S: tower::Service<Request<String>, Response = Response<Vec<u8>>, Error = Infallible>,
{
    let r = svc.oneshot(get(path)).await.unwrap();
    r.headers()
        .get("ratelimit-policy")
        .map(|v| v.to_str().unwrap().to_owned())
}

/// By default the state (and with it the backend's reference and the refusal hook) goes with
/// the last layer or service that holds it, also after requests filled the thread's caches.
#[tokio::test]
async fn the_state_is_freed_when_the_last_layer_and_service_go() {
    let limiter = limiter();
    let hook_data = Arc::new(());
    let in_hook = Arc::clone(&hook_data);
    let layer = RateLimitLayer::new(Arc::clone(&limiter)).on_refusal(move |_| {
        let _ = &in_hook;
        None
    });
    let svc = layer.layer(inner());
    let clones: Vec<_> = (0..4).map(|_| svc.clone()).collect();
    for c in &clones {
        assert!(policy(c.clone(), "/v1/items").await.is_some());
    }
    assert_eq!(
        Arc::strong_count(&limiter),
        2,
        "the state holds one reference"
    );
    drop(layer);
    drop(clones);
    assert_eq!(
        Arc::strong_count(&limiter),
        2,
        "the service still holds the state"
    );
    assert_eq!(Arc::strong_count(&hook_data), 2);
    drop(svc);
    assert_eq!(Arc::strong_count(&limiter), 1, "the state was freed");
    assert_eq!(Arc::strong_count(&hook_data), 1, "the hook was freed");
}

/// `leak` keeps the state (and the hook set before or after it) for the rest of the process:
/// the documented price of clones that count nothing.
#[tokio::test]
async fn a_leaked_state_outlives_every_layer_and_service() {
    let limiter = limiter();
    let before = Arc::new(());
    let after = Arc::new(());
    let (b, a) = (Arc::clone(&before), Arc::clone(&after));
    let layer = RateLimitLayer::new(Arc::clone(&limiter))
        .on_refusal(move |_| {
            let _ = &b;
            None
        })
        .leak()
        .on_refusal(move |_| {
            let _ = &a;
            None
        });
    let svc = layer.layer(inner());
    assert!(policy(svc.clone(), "/v1/items").await.is_some());
    drop((layer, svc));
    assert_eq!(
        Arc::strong_count(&limiter),
        2,
        "the leaked state keeps the limiter"
    );
    assert_eq!(
        Arc::strong_count(&before),
        2,
        "the hook leaked with the state"
    );
    assert_eq!(
        Arc::strong_count(&after),
        2,
        "a hook set after `leak` is leaked too"
    );
}

const RELOADED: &str = r#"
name: layer-test
identities: { capacity: 64 }
route_classes:
  read:
    burst:     { tokens: 3, per: 1s }
    sustained: { tokens: 100, per: 1h }
  write:
    burst:     { tokens: 1, per: 1s }
    sustained: { tokens: 100, per: 1h }
  special:
    burst:     { tokens: 1, per: 1s }
    sustained: { tokens: 100, per: 1h }
routes:
  - { method: GET,  path: "/v2/**",            class: read }
  - { method: "*",  path: "/v1/**",            class: write }
"#;

/// A reload of the limiter is seen on the next request by every clone of every service, on
/// every worker thread: those of a counted layer, those made before `leak` (still counting)
/// and those of the leaked layer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_is_seen_by_cloned_services_counted_or_leaked() {
    let limiter: Arc<Limiter> = limiter();
    let counted = RateLimitLayer::new(Arc::clone(&limiter));
    let before_leak = counted.clone().layer(inner());
    let leaked = counted.clone().leak().layer(inner());
    let counted = counted.layer(inner());
    let old = "\"burst\";q=2;w=1, \"sustained\";q=100;w=3600";
    let new = "\"burst\";q=3;w=1, \"sustained\";q=100;w=3600";
    macro_rules! on_workers {
        ($path:expr, $expect:expr) => {
            let mut tasks = Vec::new();
            for _ in 0..4 {
                let (c, b, l) = (counted.clone(), before_leak.clone(), leaked.clone());
                tasks.push(tokio::spawn(async move {
                    [
                        policy(c, $path).await,
                        policy(b, $path).await,
                        policy(l, $path).await,
                    ]
                }));
            }
            for t in tasks {
                for p in t.await.unwrap() {
                    assert_eq!(p.as_deref(), $expect, "{}", $path);
                }
            }
        };
    }
    on_workers!("/v1/items", Some(old));
    on_workers!("/v2/items", None);
    limiter
        .reload(Profile::from_yaml(RELOADED).unwrap())
        .unwrap();
    on_workers!("/v2/items", Some(new));
    on_workers!(
        "/v1/items",
        Some("\"burst\";q=1;w=1, \"sustained\";q=100;w=3600")
    );
}
