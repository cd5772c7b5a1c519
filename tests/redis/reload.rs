//! Reloads against Redis: a reload carries each bucket's debt over in tokens, as the embedded
//! limiter does (`Limiter::reload`), between profiles of different rates too; old values are
//! read as counted in the current intervals. (With `TOLLGATE_TEST_REDIS_MODULE=1` the servers
//! load tollgate's module and these run on it.)

use tollgate_testkit::redis_server::RedisServer;

use std::time::{Duration, Instant};

use tollgate::profile::Period;
use tollgate::quanta::Clock;
use tollgate::redis::RedisLimiter;
use tollgate::{BucketKind, Decision, Key, Limiter, Profile};

/// Burst `tokens` per `per_ms`, a sustained bucket that never binds; a generous timeout (these
/// check decisions, not timeouts).
fn burst(tokens: u64, per_ms: u64) -> Profile {
    let mut p = Profile::from_yaml(&format!(
        "name: r\nidentities: {{ capacity: 64 }}\nroute_classes:\n  w:\n    burst: {{ tokens: {tokens}, per: {per_ms}ms }}\n    sustained: {{ tokens: 4000000, per: 1s }}\n"
    ))
    .unwrap();
    p.store.timeout = Period::from_secs(5).unwrap();
    p
}

async fn limiter(server: &RedisServer, p: Profile) -> RedisLimiter {
    RedisLimiter::builder(&server.url(), p)
        .key_secret(b"test")
        .connect()
        .await
        .unwrap()
}

/// Admits until the first refusal: how many were admitted, and the refusal.
async fn drain(limiter: &RedisLimiter, key: &Key<'_>) -> (u64, Decision) {
    let mut n = 0;
    loop {
        match limiter.admit(key).await {
            Decision::Admit => n += 1,
            refused => return (n, refused),
        }
    }
}

fn burst_wait(d: &Decision) -> Duration {
    match d {
        Decision::Throttle {
            retry_after,
            bucket: BucketKind::Burst,
        } => *retry_after,
        other => panic!("not a burst throttle: {other:?}"),
    }
}

/// The counter-example: 100 admitted under 100/1s (10 ms a token), then 100/10s. The
/// debt in time (1 s) would leave 90 of the new 10 s at once; in tokens (100 of 100 ms) none,
/// and the next comes in 100 ms, as the embedded limiter answers at the same instant.
///
/// On the real clock "at the same instant" is a precondition: the debt converts as of the
/// reload, so a token of the old rate that came due before it is rightly the caller's (CI
/// met it: one admitted, then 99.4 ms). An attempt counts when the reload and the drain after
/// it ran within the wait the last refusal under 100/1s gave (at least 5 ms: a shorter one is
/// waited out first); one that did not is held to the bound of the round trips below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slower_profile_admits_nothing_more_after_a_drain() {
    let server = RedisServer::start();
    let (a, b) = (burst(100, 1_000), burst(100, 10_000));
    let redis = limiter(&server, a.clone()).await;
    let class = redis.route_class("w").unwrap();
    let mut met = false;
    for attempt in 0..10 {
        redis.reload(a.clone()).unwrap();
        let principal = format!("alice{attempt}");
        let key = Key::authenticated("acme", &principal, class).unwrap();
        let start = Instant::now();
        // (Tokens refill while the round trips run: at least the 100.)
        let (mut admitted, _) = drain(&redis, &key).await;
        assert!(admitted >= 100, "{admitted} under 100/1s");
        // A refusal whose wait leaves room: the server decided it after `sent`, so the old
        // rate's next token comes no earlier than `sent + old_wait`.
        let (sent, old_wait) = loop {
            let sent = Instant::now();
            match redis.admit(&key).await {
                Decision::Admit => admitted += 1,
                refused if burst_wait(&refused) >= Duration::from_millis(5) => {
                    break (sent, burst_wait(&refused))
                }
                refused => tokio::time::sleep(burst_wait(&refused)).await,
            }
        };
        redis.reload(b.clone()).unwrap();
        let (after, refused) = drain(&redis, &key).await;
        let took = sent.elapsed();
        if took >= old_wait {
            let bound = 100 + start.elapsed().as_millis() as u64 / 10 + 1;
            assert!(
                admitted + after <= bound,
                "{admitted} + {after}, bound {bound}"
            );
            continue;
        }
        met = true;
        assert_eq!(after, 0, "nothing more under 100/10s ({refused:?})");
        let wait = burst_wait(&refused);
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "the next token of 100 ms, less what drained since: {wait:?}"
        );
        break;
    }
    assert!(met, "no attempt reloaded within the old rate's next token");

    // The embedded limiter on a mock clock: the same answers at one instant.
    let (clock, _mock) = Clock::mock();
    let embedded = Limiter::builder(a)
        .clock(clock)
        .key_secret(b"test")
        .build()
        .unwrap();
    let key = Key::authenticated("acme", "alice", embedded.route_class("w").unwrap()).unwrap();
    for _ in 0..100 {
        assert_eq!(embedded.admit(&key), Decision::Admit);
    }
    embedded.reload(b).unwrap();
    let refused = embedded.admit(&key);
    assert_eq!(burst_wait(&refused), Duration::from_millis(100));
}

/// Back and forth between 100/1s and 100/10s after a drain: each reload converts the debt at
/// its instant (rounded up), so the round trips forgive nothing. Bound: the 100 of the first
/// drain plus one token per 10 ms (the shorter interval) of the time it ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_between_rates_forgive_nothing() {
    let server = RedisServer::start();
    let (fast, slow) = (burst(100, 1_000), burst(100, 10_000));
    let redis = limiter(&server, fast.clone()).await;
    let key = Key::authenticated("acme", "bob", redis.route_class("w").unwrap()).unwrap();
    let start = std::time::Instant::now();
    let mut counts = vec![drain(&redis, &key).await.0];
    for round in 0..6 {
        let next = if round % 2 == 0 { &slow } else { &fast };
        redis.reload(next.clone()).unwrap();
        let (n, refused) = drain(&redis, &key).await;
        burst_wait(&refused);
        counts.push(n);
    }
    let refill = start.elapsed().as_millis() as u64 / 10 + 1;
    let total: u64 = counts.iter().sum();
    assert!(
        total <= 100 + refill,
        "admitted {counts:?} = {total}, bound {}",
        100 + refill
    );
}

/// A fleet mid-rollout: one worker already on 100/10s (since it connected), another still on
/// 100/1s drains the key after that. The first converts as of the key's last charge (later
/// than its own reload instant: the old profile was still in force at a worker), so it admits
/// nothing; its refusals write nothing, so the old worker still owes in its own tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_two_profiles_forgive_nothing() {
    let server = RedisServer::start();
    let new = limiter(&server, burst(100, 10_000)).await;
    let old = limiter(&server, burst(100, 1_000)).await;
    let key = |l: &RedisLimiter| {
        Key::authenticated("acme", "carol", l.route_class("w").unwrap()).unwrap()
    };
    let (first, _) = drain(&old, &key(&old)).await;
    assert!(first >= 100, "{first}");
    let (n, refused) = drain(&new, &key(&new)).await;
    assert_eq!(n, 0, "the new profile's worker: {refused:?}");
    assert!(burst_wait(&refused) <= Duration::from_millis(100));
    let (n, refused) = drain(&old, &key(&old)).await;
    assert!(n <= 2, "the old profile's worker: {n}, {refused:?}");
}

/// Values of the previous versions carry no intervals: read as counted in the current ones,
/// after a reload too (as before this version). The 24-byte '<ddd' form here (the text form:
/// `decisions.rs`); an admission writes the current 48-byte form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_without_intervals_are_read_in_the_current_ones() {
    let server = RedisServer::start();
    let redis = limiter(&server, burst(2, 1_000)).await;
    let key = Key::authenticated("acme", "dave", redis.route_class("w").unwrap()).unwrap();
    assert_eq!(redis.admit(&key).await, Decision::Admit);
    let identity = server
        .keys()
        .into_iter()
        .find(|k| k.contains(":i:"))
        .unwrap();
    assert_eq!(server.cmd(&["STRLEN", &identity]), "48");
    redis.reload(burst(2, 10_000)).unwrap();
    // The previous version's 24 bytes: burst TAT 5 s ahead, sustained now, no expiry.
    let now = server.time_micros();
    let mut old = Vec::new();
    for v in [(now + 5_000_000) as f64, now as f64, 0.0] {
        old.extend(v.to_le_bytes());
    }
    set_bytes(&server, &identity, &old).await;
    // In the current intervals (5 s a token, 10 s the bucket): 5 s owed, one token of 5 s
    // fits, a second waits 5 s less what drained since.
    assert_eq!(redis.admit(&key).await, Decision::Admit);
    let wait = burst_wait(&redis.admit(&key).await);
    assert!(
        wait > Duration::from_millis(4_500) && wait <= Duration::from_secs(5),
        "{wait:?}"
    );
    assert_eq!(server.cmd(&["STRLEN", &identity]), "48");
}

async fn set_bytes(server: &RedisServer, key: &str, value: &[u8]) {
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = ::redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut c)
        .await
        .unwrap();
}
