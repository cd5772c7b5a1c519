//! Leased tokens: a worker takes several of an identity's tokens in one call and spends them
//! without a round trip; the store never sees more admitted than it charged, and what a lease
//! did not spend goes back exactly (on expiry, reload and shutdown).

use tollgate_testkit::redis_server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_server::RedisServer;
use tollgate::redis::RedisLimiter;
use tollgate::{Cause, Decision, Key, Profile};

/// Slow buckets (a burst token back every 1.5s, a sustained one every 72s): over a test next to
/// nothing refills, so the store's count of charged tokens can be read off the sustained TAT.
fn profile(lease: &str) -> Profile {
    Profile::from_yaml(&format!(
        "name: l\nidentities: {{ capacity: 1024 }}\nstore: {{ timeout: 2s }}\nroute_classes:\n  \
         w:\n    burst: {{ tokens: 40, per: 1m }}\n    sustained: {{ tokens: 50, per: 1h }}\n    \
         {lease}\n"
    ))
    .unwrap()
}

async fn worker(server: &RedisServer, p: Profile) -> RedisLimiter {
    RedisLimiter::builder(&server.url(), p)
        .key_secret(b"lease tests")
        .connect()
        .await
        .unwrap()
}

/// Every call the store ran: decisions and refunds, by whichever program.
fn store_calls(server: &RedisServer) -> u64 {
    ["fcall", "evalsha", "tollgate.admit", "tollgate.refund"]
        .iter()
        .map(|c| server.calls(c))
        .sum()
}

/// The tokens the store has charged `key`'s identity and not had back: its sustained TAT ahead
/// of the server's clock, in whole tokens (the bucket refills one every 72s, so a charge
/// within the last 72s counts whole).
fn charged(server: &RedisServer, limiter: &RedisLimiter, key: &Key<'_>) -> u64 {
    server.charged(&limiter.store_command(key))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_decisions_are_spent_without_a_round_trip() {
    let server = RedisServer::start();
    let limiter = worker(&server, profile("lease: { max_tokens: 16, ttl: 1s }")).await;
    let w = limiter.route_class("w").unwrap();
    let key = Key::authenticated("acme", "alice", w).unwrap();
    let before = store_calls(&server);
    for i in 0..20 {
        assert_eq!(limiter.admit(&key).await, Decision::Admit, "request {i}");
    }
    let calls = store_calls(&server) - before;
    // Leases of 1, then 8 (eight times the last), then 15 (half of the 31 the burst had left):
    // 3 calls.
    assert!(calls <= 3, "{calls} store calls for 20 decisions");
    assert!(charged(&server, &limiter, &key) >= 20);
    // On to the burst's end (40 tokens): the leases shrink to one token, and the refusal is the
    // store's, with its exact wait.
    let mut admitted = 20;
    let refusal = loop {
        match limiter.admit(&key).await {
            Decision::Admit => admitted += 1,
            d => break d,
        }
        assert!(admitted <= 41, "{admitted} admitted of a burst of 40");
    };
    match refusal {
        Decision::Throttle { retry_after, .. } => {
            assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_millis(1500));
        }
        d => panic!("expected a throttle, got {d:?}"),
    }
    assert_eq!(
        limiter.return_leases().await,
        0,
        "nothing left to give back"
    );
    assert_eq!(charged(&server, &limiter, &key), admitted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_without_a_lease_asks_the_store_every_time() {
    let server = RedisServer::start();
    let limiter = worker(&server, profile("")).await;
    let key = Key::authenticated("acme", "alice", limiter.route_class("w").unwrap()).unwrap();
    let before = store_calls(&server);
    for _ in 0..10 {
        assert_eq!(limiter.admit(&key).await, Decision::Admit);
    }
    assert_eq!(store_calls(&server) - before, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unspent_rest_goes_back_on_shutdown() {
    let server = RedisServer::start();
    let limiter = worker(&server, profile("lease: { max_tokens: 16, ttl: 1s }")).await;
    let key = Key::authenticated("acme", "bob", limiter.route_class("w").unwrap()).unwrap();
    for _ in 0..5 {
        assert_eq!(limiter.admit(&key).await, Decision::Admit);
    }
    // 1 + 8 taken, 5 spent.
    let taken = charged(&server, &limiter, &key);
    assert!(taken > 5, "{taken} taken for 5 admitted");
    assert_eq!(limiter.return_leases().await, taken - 5);
    assert_eq!(charged(&server, &limiter, &key), 5);
    // The limiter goes on, with new leases (1, then 8: six in hand).
    for _ in 0..3 {
        assert_eq!(limiter.admit(&key).await, Decision::Admit);
    }
    assert!(charged(&server, &limiter, &key) > 8);
    drop(limiter);
    // Dropped: its lease goes back from the runtime, without a caller waiting.
    let check = worker(&server, profile("")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(charged(&server, &check, &key), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_goes_back_and_is_never_spent() {
    let server = RedisServer::start();
    let limiter = worker(&server, profile("lease: { max_tokens: 16, ttl: 200ms }")).await;
    let key = Key::authenticated("acme", "carol", limiter.route_class("w").unwrap()).unwrap();
    for _ in 0..4 {
        assert_eq!(limiter.admit(&key).await, Decision::Admit);
    }
    // 1 + 8 taken, 4 spent; the last lease has 5 left until it expires.
    assert!(charged(&server, &limiter, &key) > 4);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(charged(&server, &limiter, &key), 4, "the rest went back");
    let before = store_calls(&server);
    assert_eq!(limiter.admit(&key).await, Decision::Admit);
    assert!(
        store_calls(&server) > before,
        "an expired lease is not spent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_gives_the_leases_back() {
    let server = RedisServer::start();
    let lease = "lease: { max_tokens: 16, ttl: 1s }";
    let limiter = worker(&server, profile(lease)).await;
    let key = Key::authenticated("acme", "dave", limiter.route_class("w").unwrap()).unwrap();
    for _ in 0..5 {
        assert_eq!(limiter.admit(&key).await, Decision::Admit);
    }
    assert!(charged(&server, &limiter, &key) > 5);
    limiter
        .reload(profile("lease: { max_tokens: 8, ttl: 1s }"))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(charged(&server, &limiter, &key), 5);
    let before = store_calls(&server);
    assert_eq!(limiter.admit(&key).await, Decision::Admit);
    assert_eq!(
        store_calls(&server) - before,
        1,
        "a new lease, of the new profile"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_in_hand_is_spent_while_the_store_is_down_then_decisions_fail_closed() {
    let mut server = RedisServer::start();
    let limiter = worker(&server, profile("lease: { max_tokens: 16, ttl: 1s }")).await;
    let key = Key::authenticated("acme", "erin", limiter.route_class("w").unwrap()).unwrap();
    for _ in 0..16 {
        assert_eq!(limiter.admit(&key).await, Decision::Admit);
    }
    // 1 + 8 + 15 taken, 16 spent: 8 in hand.
    let held = charged(&server, &limiter, &key) - 16;
    assert!(held > 0);
    server.kill();
    let mut admitted = 0u64;
    let unavailable = loop {
        match limiter.admit(&key).await {
            Decision::Admit => admitted += 1,
            d => break d,
        }
        assert!(admitted <= held, "never more than the lease");
    };
    assert_eq!(admitted, held);
    assert_eq!(
        unavailable,
        Decision::Unavailable {
            retry_after: None,
            cause: Cause::StoreUnavailable
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_never_admit_more_than_the_store_charged() {
    let server = RedisServer::start();
    let lease = "lease: { max_tokens: 8, ttl: 1s }";
    let mut workers = Vec::new();
    for _ in 0..4 {
        workers.push(Arc::new(worker(&server, profile(lease)).await));
    }
    let w = workers[0].route_class("w").unwrap();
    let admitted: Arc<Vec<AtomicU64>> = Arc::new((0..5).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for (i, limiter) in workers.iter().enumerate() {
        for t in 0..2 {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            tasks.push(tokio::spawn(async move {
                for r in 0..150 {
                    let who = (i + t + r) % 5;
                    let name = format!("p{who}");
                    let key = Key::authenticated("acme", &name, w).unwrap();
                    match limiter.admit(&key).await {
                        Decision::Admit => {
                            admitted[who].fetch_add(1, Ordering::Relaxed);
                        }
                        Decision::Throttle { .. } => {}
                        d => panic!("unexpected {d:?}"),
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    for (who, count) in admitted.iter().enumerate() {
        let name = format!("p{who}");
        let key = Key::authenticated("acme", &name, w).unwrap();
        let count = count.load(Ordering::Relaxed);
        // 1,200 requests for 5 identities of a burst of 40: each past its limit. Leases held by
        // the other three workers may have refused some (at most 3 x 8).
        assert!(count <= 41, "p{who}: {count} admitted of 40");
        assert!(
            count >= 40 - 3 * 8,
            "p{who}: {count} admitted, the limit is 40"
        );
        let held = charged(&server, &workers[0], &key);
        assert!(held >= count, "p{who}: {count} admitted, {held} charged");
        assert!(
            held - count <= 4 * 8,
            "p{who}: {held} charged, {count} admitted"
        );
    }
    for limiter in &workers {
        limiter.return_leases().await;
    }
    for (who, count) in admitted.iter().enumerate() {
        let name = format!("p{who}");
        let key = Key::authenticated("acme", &name, w).unwrap();
        assert_eq!(
            charged(&server, &workers[0], &key),
            count.load(Ordering::Relaxed),
            "p{who}: after the leases went back, the store holds what was admitted"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_takes_its_slots_of_shared_capacity_and_gives_back_the_rest() {
    let server = RedisServer::start();
    let p = Profile::from_yaml(
        "name: c\nidentities: { capacity: 64 }\nstore: { timeout: 2s }\nroute_classes:\n  w:\n    \
         burst: { tokens: 40, per: 1m }\n    sustained: { tokens: 50, per: 1h }\n    \
         lease: { max_tokens: 8, ttl: 1s }\nshared_capacity: { shards: 1, window: 1h, \
         slots_per_window: 1000, tenant_share: 1.0 }\n",
    )
    .unwrap();
    let limiter = worker(&server, p).await;
    let key = Key::authenticated("acme", "frank", limiter.route_class("w").unwrap()).unwrap();
    for _ in 0..5 {
        assert_eq!(limiter.admit(&key).await, Decision::Admit);
    }
    let shard = |server: &RedisServer| {
        let name = server
            .keys()
            .into_iter()
            .find(|k| k.ends_with(":c"))
            .unwrap();
        server.cmd(&["HGET", &name, "s"])
    };
    // 1 + 8 slots taken: as many as tokens.
    let taken = charged(&server, &limiter, &key);
    assert!(taken > 5);
    assert_eq!(shard(&server), taken.to_string());
    assert_eq!(limiter.return_leases().await, taken - 5);
    assert_eq!(shard(&server), "5");
}

/// Leases expire and are renewed again and again under four workers: an identity far from its
/// limits is never refused on the way, and the store always holds at least what was admitted
/// and at most one full lease a worker more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_far_from_its_limits_is_never_refused_as_leases_expire() {
    let server = RedisServer::start();
    let p = Profile::from_yaml(
        "name: d\nidentities: { capacity: 1024 }\nstore: { timeout: 1s }\nroute_classes:\n  w:\n    \
         burst: { tokens: 5000, per: 10s }\n    sustained: { tokens: 3000000, per: 366d }\n    \
         lease: { max_tokens: 256, ttl: 1s }\n",
    )
    .unwrap();
    let mut ws = Vec::new();
    for _ in 0..4 {
        ws.push(worker(&server, p.clone()).await);
    }
    let key = Key::authenticated("acme", "x", ws[0].route_class("w").unwrap()).unwrap();
    let start = std::time::Instant::now();
    let mut admitted = 0u64;
    let mut r = 0;
    while start.elapsed() < Duration::from_millis(3500) {
        r += 1;
        match ws[r % 4].admit(&key).await {
            Decision::Admit => admitted += 1,
            d => panic!("{d:?} after {admitted} in {:?}", start.elapsed()),
        }
        if admitted % 4 == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let c = charged(&server, &ws[0], &key);
    assert!(
        (admitted..=admitted + 4 * 256).contains(&c),
        "{admitted} admitted, {c} charged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_arriving_together_take_one_lease_between_them() {
    let server = RedisServer::start();
    let limiter = Arc::new(worker(&server, profile("lease: { max_tokens: 16, ttl: 1s }")).await);
    let w = limiter.route_class("w").unwrap();
    let key = Key::authenticated("acme", "grace", w).unwrap();
    // Leases of 1 and 8, the second spent: the next lease is 15 tokens.
    for _ in 0..9 {
        assert_eq!(limiter.admit(&key).await, Decision::Admit);
    }
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let key = Key::authenticated("acme", "grace", w).unwrap();
                limiter.admit(&key).await
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), Decision::Admit);
    }
    // 21 admitted; one caller took the next lease, the others their own token (or spent the
    // new lease): at most one lease's rest is held (twelve leases would be 12 x 14).
    let held = charged(&server, &limiter, &key) - 21;
    assert!(held <= 15, "{held} tokens held after 12 callers at once");
    limiter.return_leases().await;
    assert_eq!(charged(&server, &limiter, &key), 21);
}
