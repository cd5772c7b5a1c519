//! The Redis backend against a real `redis-server`: the reference model's decisions on the
//! server's clock, capacity shares, shadow mode, reload, peek, the deny cache, and what the keys
//! reveal.

use tollgate_testkit as common;
use tollgate_testkit::redis_server;

use std::collections::HashMap;
use std::time::Duration;

use common::Model;
use redis_server::RedisServer;
use tollgate::profile::{Period, ProfileErrorKind};
use tollgate::redis::{ConnectError, RedisLimiter};
use tollgate::{BucketKind, Cause, Decision, Key, Profile};

fn profile(yaml: &str) -> Profile {
    Profile::from_yaml(yaml).unwrap()
}

/// These tests check decisions, not timeouts (`redis_outage` does): a generous `store.timeout`
/// keeps a busy machine from turning a slow answer into a 503.
fn relaxed(mut p: Profile) -> Profile {
    p.store.timeout = Period::from_secs(5).unwrap();
    p
}

async fn limiter(server: &RedisServer, p: Profile) -> RedisLimiter {
    RedisLimiter::builder(&server.url(), relaxed(p))
        .key_secret(b"test")
        .connect()
        .await
        .unwrap()
}

/// A small deterministic generator (no dependency, same sequence every run).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Periods divisible by their token counts in microseconds, so the model's nanosecond
/// arithmetic and the script's microsecond arithmetic agree exactly.
const SPECS: [common::ClassSpec; 2] = [(3, 300, 10, 2_000), (2, 100, 5, 1_000)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_match_the_reference_model_on_the_server_clock() {
    let server = RedisServer::start();
    let limiter = limiter(&server, common::profile(1024, &SPECS)).await;
    let classes = [
        limiter.route_class("c0").unwrap(),
        limiter.route_class("c1").unwrap(),
    ];
    let mut model = Model::default();
    let mut rng = Lcg(7);
    let (mut admitted, mut throttled) = (0, 0);
    for _ in 0..150 {
        let who = ["alice", "bob"][rng.below(2) as usize];
        let c = rng.below(2) as usize;
        let key = Key::authenticated("acme", who, classes[c]).unwrap();
        let (verdict, now_us) = limiter.evaluate_traced(&key).await;
        let now_us = now_us.expect("the server answered");
        let expected = model.admit(who, c, SPECS[c], now_us * 1_000);
        assert_eq!(verdict.decision, expected, "{who} c{c} at {now_us}us");
        match expected {
            Decision::Admit => admitted += 1,
            _ => throttled += 1,
        }
        if rng.below(3) == 0 {
            tokio::time::sleep(Duration::from_millis(rng.below(60))).await;
        }
    }
    // The sequence exercised both outcomes.
    assert!(admitted > 10 && throttled > 10, "{admitted} {throttled}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_flood_never_exceeds_its_share_per_window() {
    let server = RedisServer::start();
    let p = profile(
        "name: cap\nidentities: { capacity: 1024 }\n\
         route_classes:\n  read:\n    burst: { tokens: 100000, per: 1s }\n    sustained: { tokens: 1000000, per: 1h }\n\
         shared_capacity: { shards: 1, window: 200ms, slots_per_window: 20, tenant_share: 0.5 }\n",
    );
    let limiter = std::sync::Arc::new(limiter(&server, p).await);
    let read = limiter.route_class("read").unwrap();
    let stop = tokio::time::Instant::now() + Duration::from_millis(900);
    let mut tasks = Vec::new();
    for i in 0..6 {
        let limiter = limiter.clone();
        tasks.push(tokio::spawn(async move {
            let principal = format!("bot{i}");
            let mut seen = Vec::new();
            while tokio::time::Instant::now() < stop {
                let key = Key::authenticated("flood-corp", &principal, read).unwrap();
                let (v, now) = limiter.evaluate_traced(&key).await;
                seen.push(("flood", v.decision, now.unwrap()));
            }
            seen
        }));
    }
    let calm = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while tokio::time::Instant::now() < stop {
                let key = Key::authenticated("calm-inc", "alice", read).unwrap();
                let (v, now) = limiter.evaluate_traced(&key).await;
                seen.push(("calm", v.decision, now.unwrap()));
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            seen
        })
    };
    let mut all = calm.await.unwrap();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let mut per_window: HashMap<(u64, &str), u64> = HashMap::new();
    for (tenant, d, now) in &all {
        match d {
            Decision::Admit => *per_window.entry((now / 200_000, tenant)).or_default() += 1,
            Decision::Unavailable {
                retry_after: Some(wait),
                cause: Cause::TenantShare,
            } => {
                assert_eq!(*tenant, "flood", "calm-inc stays within its share");
                // The time to the next window, computed from the server's clock.
                assert_eq!(wait.as_micros() as u64, 200_000 - now % 200_000);
            }
            other => panic!("{tenant}: {other:?}"),
        }
    }
    for ((w, tenant), n) in &per_window {
        assert!(*n <= 10, "{tenant} got {n} slots in window {w}");
    }
    let flood_windows = per_window.keys().filter(|(_, t)| *t == "flood").count();
    assert!(flood_windows >= 3, "the flood ran through several windows");
    assert!(all.iter().filter(|(t, _, _)| *t == "flood").count() > 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_full_is_refused_with_the_next_window() {
    let server = RedisServer::start();
    let p = profile(
        "name: cap\nidentities: { capacity: 1024 }\n\
         route_classes:\n  read:\n    burst: { tokens: 1000, per: 1s }\n    sustained: { tokens: 100000, per: 1h }\n\
         shared_capacity: { shards: 1, window: 1h, slots_per_window: 4, tenant_share: 0.5 }\n",
    );
    let limiter = limiter(&server, p).await;
    let read = limiter.route_class("read").unwrap();
    let mut results = Vec::new();
    for tenant in ["t1", "t2", "t3"] {
        for _ in 0..3 {
            let key = Key::authenticated(tenant, "p", read).unwrap();
            results.push(limiter.admit(&key).await);
        }
    }
    let count = |f: fn(&Decision) -> bool| results.iter().filter(|d| f(d)).count();
    assert_eq!(count(Decision::is_admit), 4, "{results:?}");
    assert_eq!(
        count(|d| matches!(
            d,
            Decision::Unavailable {
                cause: Cause::TenantShare,
                ..
            }
        )),
        2,
        "{results:?}"
    );
    assert_eq!(
        count(|d| matches!(
            d,
            Decision::Unavailable {
                cause: Cause::ShardFull,
                retry_after: Some(w)
            } if *w <= Duration::from_secs(3600)
        )),
        3,
        "{results:?}"
    );
    // A refusal for capacity charged nothing: t3's bucket still has all its tokens.
    let key = Key::authenticated("t3", "p", read).unwrap();
    assert!(matches!(
        limiter.peek(&key).await,
        Decision::Unavailable {
            cause: Cause::ShardFull,
            ..
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_admits_and_reports() {
    let server = RedisServer::start();
    let p = profile(
        "name: s\nmode: shadow\nidentities: { capacity: 64 }\n\
         route_classes:\n  w:\n    burst: { tokens: 1, per: 10s }\n    sustained: { tokens: 10, per: 1h }\n",
    );
    let limiter = limiter(&server, p).await;
    let key = Key::authenticated("acme", "alice", limiter.route_class("w").unwrap()).unwrap();
    let first = limiter.evaluate(&key).await;
    assert_eq!(
        (first.decision, first.computed),
        (Decision::Admit, Decision::Admit)
    );
    let second = limiter.evaluate(&key).await;
    assert_eq!(second.decision, Decision::Admit);
    assert!(matches!(
        second.computed,
        Decision::Throttle {
            bucket: BucketKind::Burst,
            ..
        }
    ));
    assert_eq!(limiter.admit(&key).await, Decision::Admit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peek_charges_nothing_and_reload_keeps_the_debt() {
    let server = RedisServer::start();
    let yaml = |burst: u64, extra: &str| {
        format!(
            "name: r\nidentities: {{ capacity: 64 }}\nroute_classes:\n  w:\n    burst: {{ tokens: {burst}, per: 1s }}\n    sustained: {{ tokens: 100, per: 1h }}\n{extra}"
        )
    };
    let limiter = limiter(&server, profile(&yaml(5, ""))).await;
    let key = Key::authenticated("acme", "alice", limiter.route_class("w").unwrap()).unwrap();
    for _ in 0..3 {
        assert_eq!(limiter.peek(&key).await, Decision::Admit);
    }
    assert_eq!(limiter.admit(&key).await, Decision::Admit);
    assert_eq!(limiter.admit(&key).await, Decision::Admit);
    // Two of five tokens spent (400ms of debt); the new bucket holds one token of 1s: the debt
    // carries over in tokens, two of 1 s, so the next request waits 2 s (less what drained).
    limiter
        .reload(profile(&yaml(
            1,
            "  x:\n    burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 1, per: 1s }\n",
        )))
        .unwrap();
    match limiter.admit(&key).await {
        Decision::Throttle {
            retry_after,
            bucket: BucketKind::Burst,
        } => assert!(
            retry_after <= Duration::from_secs(2) && retry_after > Duration::from_millis(1_500),
            "{retry_after:?}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(limiter.route_class("x").is_some());
    let dropped = limiter.reload(profile(&yaml(1, "")));
    assert!(dropped.is_err(), "dropping a class is refused");
    assert!(limiter.route_class("x").is_some(), "the old profile stays");
}

/// A profile changed in Rust is validated by the Redis backend too: the builder and `reload`
/// refuse it with the error YAML gives, and the old profile stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_profile_is_refused_by_connect_and_reload() {
    let src = "name: r\nidentities: { capacity: 64 }\nroute_classes:\n  w:\n    burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 100, per: 1h }\nroutes:\n  - { method: GET, path: \"/**\", class: w }\n";
    let mut bad = profile(src);
    bad.routes[0].class = "unknown".into();
    let expected = bad.validate().unwrap_err();
    assert_eq!(expected.kind(), ProfileErrorKind::Invalid);
    // Refused before connecting: no server is needed at this address.
    match RedisLimiter::builder("redis://127.0.0.1:1", bad.clone())
        .key_secret(b"test")
        .connect()
        .await
    {
        Err(ConnectError::Profile(e)) => assert_eq!(e, expected),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("connected with an invalid profile"),
    }
    let server = RedisServer::start();
    let limiter = limiter(&server, profile(src)).await;
    assert_eq!(limiter.reload(bad), Err(expected));
    assert_eq!(
        *limiter.profile(),
        relaxed(profile(src)),
        "the old profile stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deny_cache_answers_throttles_locally_and_exactly() {
    let server = RedisServer::start();
    let p = profile(
        "name: d\nidentities: { capacity: 64 }\n\
         route_classes:\n  w:\n    burst: { tokens: 1, per: 300ms }\n    sustained: { tokens: 100, per: 1h }\n",
    );
    let limiter = RedisLimiter::builder(&server.url(), relaxed(p))
        .key_secret(b"test")
        .deny_cache(128)
        .connect()
        .await
        .unwrap();
    let key = Key::authenticated("acme", "alice", limiter.route_class("w").unwrap()).unwrap();
    assert_eq!(limiter.admit(&key).await, Decision::Admit);
    let Decision::Throttle { retry_after, .. } = limiter.admit(&key).await else {
        panic!("throttled")
    };
    // The function's calls, or the module's (`TOLLGATE_TEST_REDIS_MODULE=1`).
    let decisions = || server.calls("fcall") + server.calls("tollgate.admit");
    let calls = decisions();
    let mut last = retry_after;
    for _ in 0..50 {
        let Decision::Throttle { retry_after, .. } = limiter.admit(&key).await else {
            panic!("still throttled")
        };
        assert!(retry_after <= last);
        last = retry_after;
    }
    assert_eq!(decisions(), calls, "no round trip while denied");
    // Retrying at the instant given is admitted (by the server, on its own clock).
    tokio::time::sleep(last).await;
    assert_eq!(limiter.admit(&key).await, Decision::Admit);
    assert!(decisions() > calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_hold_digests_share_the_shard_tag_and_expire() {
    let server = RedisServer::start();
    let p = profile(
        "name: k\nidentities: { capacity: 64 }\n\
         route_classes:\n  w:\n    burst: { tokens: 2, per: 1s }\n    sustained: { tokens: 100, per: 10s }\n\
         shared_capacity: { shards: 8, window: 10s, slots_per_window: 100, tenant_share: 0.5 }\n",
    );
    // The secret from Redis, as workers without configuration get it.
    let limiter = RedisLimiter::connect(&server.url(), relaxed(p))
        .await
        .unwrap();
    let w = limiter.route_class("w").unwrap();
    for principal in ["principal-OKAPI-42", "principal-QUOKKA-9"] {
        for _ in 0..3 {
            let key = Key::authenticated("tenant-ZEBRA-7781", principal, w).unwrap();
            limiter.admit(&key).await;
        }
    }
    limiter
        .admit(&Key::anonymous("198.51.100.77".parse().unwrap(), w))
        .await;
    let keys = server.keys();
    assert!(keys.len() >= 5, "{keys:?}");
    let mut zebra_tags = std::collections::HashSet::new();
    for k in &keys {
        for secret in [
            "ZEBRA",
            "zebra",
            "OKAPI",
            "okapi",
            "QUOKKA",
            "7781",
            "198.51",
            "principal",
            "tenant",
        ] {
            assert!(!k.contains(secret), "key {k} reveals {secret}");
        }
        assert!(k.starts_with("tollgate:{"), "{k}");
        if k == "tollgate:{secret}" {
            continue;
        }
        let ttl: i64 = server.cmd(&["PTTL", k]).parse().unwrap();
        assert!(ttl > 0, "{k} has no expiry ({ttl})");
        let tag = &k[..k.find('}').unwrap() + 1];
        zebra_tags.insert(tag.to_owned());
    }
    // One tenant's identities, its count and its shard share one tag (plus the anonymous
    // pseudo-tenant's, which may be another shard).
    assert!(zebra_tags.len() <= 2, "{zebra_tags:?}");
    // An identity key expires once its buckets are full again (<= 1s here), plus the margin
    // and at most an eighth of that second (the slack that saves rewriting the expiry).
    let identity = keys.iter().find(|k| k.contains(":i:")).unwrap();
    let ttl: i64 = server.cmd(&["PTTL", identity]).parse().unwrap();
    assert!(ttl <= 1_000 + 125 + 101, "{ttl}");
    // The secret never expires.
    assert_eq!(server.cmd(&["PTTL", "tollgate:{secret}"]), "-1");
}

/// Burst `tokens` per `per_ms`, a sustained bucket that never binds.
fn burst_only(tokens: u64, per_ms: u64) -> Profile {
    profile(&format!(
        "name: r\nidentities: {{ capacity: 64 }}\nroute_classes:\n  w:\n    burst: {{ tokens: {tokens}, per: {per_ms}ms }}\n    sustained: {{ tokens: 4000000, per: 1s }}\n"
    ))
}

/// Admits until the first refusal (a refusal also ends it): how many were admitted.
async fn drain(limiter: &RedisLimiter, key: &Key<'_>) -> (u64, Decision) {
    let mut n = 0;
    loop {
        match limiter.admit(key).await {
            Decision::Admit => n += 1,
            refused => return (n, refused),
        }
    }
}

/// A reload round trip forgives no debt: a script that clamped a TAT to the new, smaller
/// bucket would grant the difference again on the way back. Burst 200/2s and 100/1s
/// alternately, as fast as the round trips go (well under the 10 ms a token takes to come
/// back): the 2 s of debt carries over whole, so nothing beyond the first 200 and maybe a
/// token or two of refill while it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_round_trip_does_not_forgive_debt() {
    let server = RedisServer::start();
    let (big, small) = (burst_only(200, 2_000), burst_only(100, 1_000));
    let limiter = limiter(&server, big.clone()).await;
    let key = Key::authenticated("acme", "alice", limiter.route_class("w").unwrap()).unwrap();
    let start = std::time::Instant::now();
    let mut counts = vec![drain(&limiter, &key).await.0];
    for round in 0..4 {
        limiter
            .reload(relaxed(if round % 2 == 0 {
                small.clone()
            } else {
                big.clone()
            }))
            .unwrap();
        let (n, refused) = drain(&limiter, &key).await;
        counts.push(n);
        assert!(
            matches!(
                refused,
                Decision::Throttle {
                    bucket: BucketKind::Burst,
                    ..
                }
            ),
            "{refused:?}"
        );
    }
    // The refill while it ran: one token per 10 ms.
    let refill = start.elapsed().as_millis() as u64 / 10 + 1;
    let total: u64 = counts.iter().sum();
    assert!(
        total <= 200 + refill,
        "admitted {counts:?} = {total}, bound {}",
        200 + refill
    );
    // Under 100/1s, right after emptying 200/2s, the wait is the debt beyond one token: about
    // 1.01 s, where the clamp said 10 ms.
    limiter.reload(relaxed(small)).unwrap();
    match limiter.admit(&key).await {
        Decision::Throttle { retry_after, .. } => {
            assert!(retry_after > Duration::from_millis(900), "{retry_after:?}")
        }
        other => panic!("{other:?}"),
    }
}

/// Reloads on the real clock stay within the bound: 8 tasks admit one identity while the test reloads every 5 ms
/// between burst 100/1s and 200/2s (both 100/s). Bound: `200 + elapsed * 100/s`. Two seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloading_every_5ms_stays_within_the_bound() {
    let server = RedisServer::start();
    let (a, b) = (burst_only(100, 1_000), burst_only(200, 2_000));
    let limiter = std::sync::Arc::new(limiter(&server, a.clone()).await);
    let w = limiter.route_class("w").unwrap();
    let start = std::time::Instant::now();
    let run_for = Duration::from_secs(2);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let key = Key::authenticated("acme", "hot", w).unwrap();
                let mut admitted = 0u64;
                while start.elapsed() < run_for {
                    admitted += u64::from(limiter.admit(&key).await.is_admit());
                }
                admitted
            })
        })
        .collect();
    let mut reloads = 0u64;
    while start.elapsed() < run_for {
        tokio::time::sleep(Duration::from_millis(5)).await;
        reloads += 1;
        let next = if reloads % 2 == 0 { &a } else { &b };
        limiter.reload(relaxed(next.clone())).unwrap();
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    let elapsed = start.elapsed();
    let bound = 200 + elapsed.as_millis() as u64 / 10;
    eprintln!("Redis, real clock: {admitted} admitted in {elapsed:?} with {reloads} reloads; bound {bound}");
    assert!(admitted <= bound, "{admitted} admitted, bound {bound}");
}

/// After an upgrade, state the previous script wrote ("<burst TAT>:<sustained TAT>" in
/// microseconds) is read as it is: a debt it recorded still holds. What this version writes is
/// the packed form (six doubles, 48 bytes: see `admit.lua`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_of_the_previous_script_version_is_honoured() {
    let server = RedisServer::start();
    let limiter = limiter(&server, burst_only(2, 1_000)).await;
    let key = Key::authenticated("acme", "alice", limiter.route_class("w").unwrap()).unwrap();
    assert_eq!(limiter.admit(&key).await, Decision::Admit);
    let identity = server
        .keys()
        .into_iter()
        .find(|k| k.contains(":i:"))
        .unwrap();
    assert_eq!(server.cmd(&["STRLEN", &identity]), "48");
    // The previous version's text: burst TAT 5 s ahead of the server's clock.
    let now = server.time_micros();
    let old = format!("{}:{}", now + 5_000_000, now);
    server.cmd(&["SET", &identity, &old, "PX", "60000"]);
    match limiter.admit(&key).await {
        Decision::Throttle {
            retry_after,
            bucket: BucketKind::Burst,
        } => assert!(
            // 5 s of debt plus one token of 500 ms, less the 1 s the bucket holds.
            retry_after > Duration::from_millis(4_000)
                && retry_after <= Duration::from_millis(4_500),
            "{retry_after:?}"
        ),
        other => panic!("{other:?}"),
    }
    // A refusal writes nothing: the old text is still there.
    assert_eq!(server.cmd(&["GET", &identity]), old);
}
