//! One profile for the fleet: a profile published to Redis reaches every watching worker, an
//! invalid one never leaves the publisher, and whatever a worker cannot use (a corrupt value,
//! a reload its limiter refuses) leaves its profile in force, counted.

use tollgate_testkit::redis_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_server::RedisServer;
use tollgate::redis::{FleetProfile, FleetSigningKey, PublishError, RedisLimiter};
use tollgate::Profile;

/// The profile the workers start with; `burst` varies so that a switch shows.
fn profile(burst: u64, capacity: u64) -> String {
    format!(
        "name: fleet\nidentities: {{ capacity: {capacity} }}\nstore: {{ timeout: 5s }}\n\
         route_classes:\n  w:\n    burst: {{ tokens: {burst}, per: 1s }}\n    \
         sustained: {{ tokens: 500, per: 1m }}\n"
    )
}

fn burst(limiter: &RedisLimiter) -> u64 {
    limiter
        .profile()
        .route_class("w")
        .unwrap()
        .burst
        .tokens
        .get()
}

async fn worker(server: &RedisServer) -> Arc<RedisLimiter> {
    let p = Profile::from_yaml(&profile(5, 64)).unwrap();
    Arc::new(
        RedisLimiter::builder(&server.url(), p)
            .key_secret(b"fleet")
            .connect()
            .await
            .unwrap(),
    )
}

/// Waits (at most 5s) until `done`, returning how long it took.
async fn until(mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "not switched within 5s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_profile_reaches_every_watching_worker() {
    let server = RedisServer::start();
    let (a, b) = (worker(&server).await, worker(&server).await);
    // Nothing published yet: each keeps the profile it was built with.
    let _wa = a.watch_profile("checkout").await.unwrap();
    let _wb = b.watch_profile("checkout").await.unwrap();
    assert_eq!((a.profile_version(), burst(&a)), (None, 5));
    assert_eq!(a.published_limits().profile_version, None);

    // The publisher has its own connection, no limiter and no profile of its own.
    let publisher = FleetProfile::connect(&server.url(), "tollgate", "checkout")
        .await
        .unwrap();
    let sent = Instant::now();
    let v = publisher.publish(&profile(7, 64)).await.unwrap();
    assert_eq!(v, 1);
    let ta = until(|| a.profile_version() == Some(1)).await;
    let tb = until(|| b.profile_version() == Some(1)).await;
    let both = sent.elapsed();
    assert_eq!((burst(&a), burst(&b)), (7, 7));
    assert_eq!(a.published_limits().profile_version, Some(1));
    println!(
        "fleet switch (announced): worker a {ta:?}, worker b after a {tb:?}, both {both:?} after publish"
    );

    // An announcement lost (written without PUBLISH, as during a reconnect): the poll finds it.
    let key = publisher.key().to_owned();
    server.cmd(&["HSET", &key, "version", "2", "body", &profile(9, 64)]);
    let polled = Instant::now();
    until(|| a.profile_version() == Some(2) && b.profile_version() == Some(2)).await;
    println!(
        "fleet switch (polled, no announcement): both within {:?}",
        polled.elapsed()
    );
    assert_eq!((burst(&a), burst(&b)), (9, 9));

    // A worker that starts after the publish is on the published version when watching begins.
    let c = worker(&server).await;
    let _wc = c.watch_profile("checkout").await.unwrap();
    assert_eq!((c.profile_version(), burst(&c)), (Some(2), 9));
    // And the next publish follows the version in Redis, whoever wrote it.
    assert_eq!(publisher.publish(&profile(11, 64)).await.unwrap(), 3);
    until(|| c.profile_version() == Some(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_redis_loses_its_data_the_next_publish_is_taken_though_its_version_repeats() {
    let mut server = RedisServer::start();
    let a = worker(&server).await;
    let _watch = a.watch_profile("checkout").await.unwrap();
    let publisher = a.fleet_profile("checkout").unwrap();
    assert_eq!(publisher.publish(&profile(7, 64)).await.unwrap(), 1);
    until(|| a.profile_version() == Some(1)).await;
    // A restart without persistence: the count starts again, the publish's id tells it apart.
    server.restart();
    let started = Instant::now();
    let v = loop {
        match publisher.publish(&profile(8, 64)).await {
            Ok(v) => break v,
            Err(e) => {
                assert!(started.elapsed() < Duration::from_secs(5), "{e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(v, 1);
    until(|| burst(&a) == 8).await;
    assert_eq!(a.profile_version(), Some(1));
}

/// A worker that trusts a key takes only what it signed: not an unsigned version, not a
/// signed body with another version number written over it, and not an older signed publish
/// written back whole (its signature is good, but it was signed before the version in force).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_trusting_a_key_refuses_unsigned_altered_and_replayed_versions() {
    let server = RedisServer::start();
    let a = worker(&server).await;
    let key = FleetSigningKey::generate();
    let fleet = a.fleet_profile("signed").unwrap();
    let _watch = fleet
        .clone()
        .trusting(vec![key.verifying_key()])
        .watch_every(&a, Duration::from_millis(20))
        .await;
    let hash = fleet.key().to_owned();
    let mut conn = ::redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let fields = |c: &mut ::redis::Connection| -> Vec<(String, Vec<u8>)> {
        ::redis::cmd("HGETALL").arg(&hash).query(c).unwrap()
    };
    let write = |c: &mut ::redis::Connection, fields: &[(String, Vec<u8>)]| {
        let mut hset = ::redis::cmd("HSET");
        hset.arg(&hash);
        for (k, v) in fields {
            hset.arg(k).arg(v.as_slice());
        }
        let _: () = hset.query(c).unwrap();
    };
    assert_eq!(
        fleet.publish_signed(&profile(6, 64), &key).await.unwrap(),
        1
    );
    until(|| burst(&a) == 6).await;
    let first = fields(&mut conn);
    // Signed later: version 2, in force.
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        fleet.publish_signed(&profile(7, 64), &key).await.unwrap(),
        2
    );
    until(|| burst(&a) == 7).await;

    let settle = || tokio::time::sleep(Duration::from_millis(200));
    // Unsigned.
    assert_eq!(fleet.publish(&profile(8, 64)).await.unwrap(), 3);
    settle().await;
    assert_eq!((a.profile_version(), burst(&a)), (Some(2), 7));
    // Version 1's body and signature under another version number.
    let renumbered: Vec<_> = first
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                if k == "version" {
                    b"9".to_vec()
                } else {
                    v.clone()
                },
            )
        })
        .collect();
    write(&mut conn, &renumbered);
    settle().await;
    assert_eq!((a.profile_version(), burst(&a)), (Some(2), 7));
    // Version 1 written back whole: signed well, but before version 2.
    write(&mut conn, &first);
    settle().await;
    assert_eq!((a.profile_version(), burst(&a)), (Some(2), 7));
    // The publisher's next version goes through.
    assert!(fleet.publish_signed(&profile(9, 64), &key).await.is_ok());
    until(|| burst(&a) == 9).await;
}

#[tokio::test]
async fn an_invalid_profile_is_refused_at_publish_and_nothing_changes() {
    let server = RedisServer::start();
    let publisher = FleetProfile::connect(&server.url(), "tollgate", "checkout")
        .await
        .unwrap();
    let bad = "name: fleet\nroute_classes:\n  w:\n    burst: { tokens: 0, per: 1s }\n    \
               sustained: { tokens: 5, per: 1m }\n";
    let Err(PublishError::Invalid(e)) = publisher.publish(bad).await else {
        panic!("an invalid profile must be refused");
    };
    assert_eq!(e.line(), Some(4), "{e}");
    assert!(e.column().is_some(), "{e}");
    assert!(server.keys().is_empty(), "{:?}", server.keys());

    // After a good publish, a bad one leaves version and body as they were.
    assert_eq!(publisher.publish(&profile(7, 64)).await.unwrap(), 1);
    let before = server.cmd(&["HGETALL", publisher.key()]);
    assert!(matches!(
        publisher.publish("name: [").await,
        Err(PublishError::Invalid(_))
    ));
    assert_eq!(server.cmd(&["HGETALL", publisher.key()]), before);
    assert_eq!(publisher.published_version().await.unwrap(), Some(1));
    // The key holds no tenant data and sits in one slot with every other fleet key.
    assert_eq!(publisher.key(), "tollgate:{fleet}:profile:checkout");
    // A name that would change the hash tag is refused.
    assert!(FleetProfile::connect(&server.url(), "tollgate", "a{b}")
        .await
        .is_err());
}

#[cfg(feature = "metrics")]
mod counted {
    use super::*;
    use metrics_util::debugging::DebuggingRecorder;
    use tollgate_testkit::metrics::{snapshot, value};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A worker watching `checkout`, its handles on `recorder`, polling every 20ms.
    fn watched(
        rt: &tokio::runtime::Runtime,
        recorder: &DebuggingRecorder,
        server: &RedisServer,
    ) -> (Arc<RedisLimiter>, tollgate::redis::FleetWatch) {
        metrics::with_local_recorder(recorder, || {
            rt.block_on(async {
                let limiter = worker(server).await;
                let fleet = limiter.fleet_profile("checkout").unwrap();
                let watch = fleet.watch_every(&limiter, Duration::from_millis(20)).await;
                (limiter, watch)
            })
        })
    }

    /// The watcher's counts: (invalid bodies, refused reloads, version in force).
    fn counted(snap: &[(String, Vec<String>, f64)]) -> (f64, f64, f64) {
        let errors = |kind: &str| {
            let kind = format!("kind={kind}");
            let labels = ["name=checkout", kind.as_str()];
            value(snap, "tollgate_fleet_profile_errors_total", &labels)
        };
        let version = value(snap, "tollgate_fleet_profile_version", &["name=checkout"]);
        (errors("invalid"), errors("refused"), version)
    }

    #[test]
    fn the_version_in_force_is_a_gauge_and_in_the_discovery_document() {
        let server = RedisServer::start();
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let rt = runtime();
        let (limiter, _watch) = watched(&rt, &recorder, &server);
        let snap = snapshot(&snapshotter);
        assert_eq!(
            value(&snap, "tollgate_fleet_profile_version", &["name=checkout"]),
            0.0
        );
        let doc = serde_json::to_value(limiter.published_limits()).unwrap();
        assert!(doc.get("profile_version").is_none(), "{doc}");

        rt.block_on(async {
            let fleet = limiter.fleet_profile("checkout").unwrap();
            for burst in [6, 7] {
                fleet.publish(&profile(burst, 64)).await.unwrap();
            }
            until(|| limiter.profile_version() == Some(2)).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        });
        let snap = snapshot(&snapshotter);
        assert_eq!(
            value(&snap, "tollgate_fleet_profile_version", &["name=checkout"]),
            2.0
        );
        let doc = serde_json::to_value(limiter.published_limits()).unwrap();
        assert_eq!(doc["profile_version"], 2, "{doc}");
        assert_eq!(doc["route_classes"][0]["burst"]["tokens"], 7, "{doc}");

        // A local reload puts a profile that is not the fleet's in force: the document drops
        // the version, and the watcher brings the fleet's back.
        limiter
            .reload(Profile::from_yaml(&profile(3, 64)).unwrap())
            .unwrap();
        assert_eq!(limiter.published_limits().profile_version, None);
        rt.block_on(until(|| limiter.profile_version() == Some(2)));
        assert_eq!(burst(&limiter), 7);
    }

    #[test]
    fn a_corrupt_value_keeps_the_profile_in_force_and_is_counted_once() {
        let server = RedisServer::start();
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let rt = runtime();
        let (limiter, _watch) = watched(&rt, &recorder, &server);
        let fleet = limiter.fleet_profile("checkout").unwrap();
        rt.block_on(async {
            fleet.publish(&profile(7, 64)).await.unwrap();
            until(|| limiter.profile_version() == Some(1)).await;
        });
        let key = fleet.key().to_owned();
        // Written behind the publisher's back: bodies that are not profiles, a version that
        // is not a number, and a version with no body. Each stays for a dozen polls.
        let corrupt: [&[&str]; 4] = [
            &["HSET", &key, "version", "2", "body", "route_classes: ["],
            &[
                "HSET",
                &key,
                "version",
                "3",
                "body",
                "name: fleet\nroute_classes: 7\n",
            ],
            &["HSET", &key, "version", "x"],
            &["HDEL", &key, "body"],
        ];
        for cmd in corrupt {
            if cmd[0] == "HDEL" {
                server.cmd(&["HSET", &key, "version", "4"]);
            }
            server.cmd(cmd);
            rt.block_on(async { tokio::time::sleep(Duration::from_millis(250)).await });
            assert_eq!(limiter.profile_version(), Some(1), "after {cmd:?}");
            assert_eq!(burst(&limiter), 7);
        }
        let snap = snapshot(&snapshotter);
        assert_eq!(counted(&snap), (4.0, 0.0, 1.0), "{snap:?}");
        // The next good publish is taken.
        rt.block_on(async {
            assert_eq!(fleet.publish(&profile(8, 64)).await.unwrap(), 5);
            until(|| limiter.profile_version() == Some(5)).await;
        });
        assert_eq!(burst(&limiter), 8);
    }

    #[test]
    fn a_reload_the_limiter_refuses_keeps_the_old_profile_and_is_counted() {
        let server = RedisServer::start();
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let rt = runtime();
        let (limiter, _watch) = watched(&rt, &recorder, &server);
        let fleet = limiter.fleet_profile("checkout").unwrap();
        rt.block_on(async {
            fleet.publish(&profile(7, 64)).await.unwrap();
            until(|| limiter.profile_version() == Some(1)).await;
            // Valid, so published, but a reload may not change `identities.capacity`.
            assert_eq!(fleet.publish(&profile(9, 128)).await.unwrap(), 2);
            tokio::time::sleep(Duration::from_millis(250)).await;
        });
        assert_eq!((limiter.profile_version(), burst(&limiter)), (Some(1), 7));
        let snap = snapshot(&snapshotter);
        assert_eq!(counted(&snap), (0.0, 1.0, 1.0), "{snap:?}");
        rt.block_on(async {
            assert_eq!(fleet.publish(&profile(10, 64)).await.unwrap(), 3);
            until(|| limiter.profile_version() == Some(3)).await;
        });
        assert_eq!(burst(&limiter), 10);
    }
}

/// Replays `fuzz/corpus/fleet_message/` through the `fleet_message` fuzz check (what a
/// watcher reads from Redis, decoded; no server needed).
#[test]
fn fleet_message_corpus() {
    let corpus = tollgate_testkit::fuzz::corpus::replay;
    corpus(
        "fleet_message",
        10,
        tollgate_testkit::fuzz::fleet_message::check,
    );
    // The valid seed is accepted (the check alone would also pass if all were refused).
    let dir = tollgate_testkit::fuzz::corpus::dir("fleet_message");
    let valid = std::fs::read(dir.join("seed-valid")).unwrap();
    let (version, body) = tollgate_testkit::fuzz::fleet_message::fields(&valid);
    let m = tollgate::redis::decode_fleet_message(version, body)
        .unwrap()
        .unwrap();
    assert_eq!(m.version, 7);
}
