//! Weighted cost on Redis: `admit_n` against the reference model on the server's clock (mixed
//! `n`, `n = 0`, a cost larger than a bucket, refused before any round trip), and `admit_all`'s
//! refunds of tokens and shard slots, side by side with the embedded limiter.

use tollgate_testkit as common;
use tollgate_testkit::redis_server::RedisServer;

use std::time::Duration;

use common::Model;
use tollgate::profile::Period;
use tollgate::redis::RedisLimiter;
use tollgate::{BucketKind, Cause, Decision, Key, Limiter, Profile};

async fn limiter(server: &RedisServer, mut p: Profile) -> RedisLimiter {
    // Decisions, not timeouts, are under test here.
    p.store.timeout = Period::from_secs(5).unwrap();
    RedisLimiter::builder(&server.url(), p)
        .key_secret(b"test")
        .connect()
        .await
        .unwrap()
}

/// Periods divisible by their token counts in microseconds (the script's unit).
const SPECS: [common::ClassSpec; 2] = [(4, 400, 10, 2_000), (3, 300, 6, 1_200)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_decisions_match_the_reference_model_on_the_server_clock() {
    let server = RedisServer::start();
    let limiter = limiter(&server, common::profile(1024, &SPECS)).await;
    let classes = [
        limiter.route_class("c0").unwrap(),
        limiter.route_class("c1").unwrap(),
    ];
    let mut model = Model::default();
    let mut seed = 11u64;
    let mut below = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let mut last_ns = 0;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let who = ["alice", "bob"][below(2) as usize];
        let c = below(2) as usize;
        let n = [0, 1, 1, 2, 3, 4, 7, 11, u32::MAX][below(9) as usize];
        let key = Key::authenticated("acme", who, classes[c]).unwrap();
        let (verdict, now_us) = limiter.evaluate_n_traced(&key, n).await;
        if let Decision::Exceeds { .. } = verdict.decision {
            assert_eq!(
                now_us, None,
                "a cost no bucket holds is refused without a round trip"
            );
        } else {
            last_ns = now_us.expect("the server answered") * 1_000;
        }
        let expected = model.admit_n(who, c, SPECS[c], last_ns, n);
        assert_eq!(
            verdict.decision, expected,
            "{who} c{c} n {n} at {last_ns}ns"
        );
        seen.insert(std::mem::discriminant(&expected));
        if below(3) == 0 {
            tokio::time::sleep(Duration::from_millis(below(80))).await;
        }
    }
    assert_eq!(
        seen.len(),
        3,
        "admits, throttles and exceeds were all exercised"
    );
}

/// One shard of 8 slots per hour that the one tenant may use whole; a burst of 5 per hour, so
/// nothing refills while the test runs.
const CAPACITY: &str = "name: w\nidentities: { capacity: 1024, tenant_share: 1.0 }\n\
    route_classes:\n  c0:\n    burst: { tokens: 5, per: 1h }\n    sustained: { tokens: 1000, per: 1d }\n\
    shared_capacity: { shards: 1, window: 1h, slots_per_window: 8, tenant_share: 1.0 }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admit_all_gives_back_tokens_and_slots_like_the_embedded_limiter() {
    let server = RedisServer::start();
    let p = Profile::from_yaml(CAPACITY).unwrap();
    let redis = limiter(&server, p.clone()).await;
    let (clock, _mock) = tollgate::quanta::Clock::mock();
    let embedded = Limiter::builder(p)
        .clock(clock)
        .key_secret(b"test")
        .build()
        .unwrap();
    let (rc, ec) = (
        redis.route_class("c0").unwrap(),
        embedded.route_class("c0").unwrap(),
    );
    let k = |c, p: &'static str| Key::authenticated("acme", p, c).unwrap();
    // Each step on both backends; decisions compared by outcome (the waits are on different
    // clocks), and a capacity refusal for a cost within a window carries a wait on both.
    let steps: [&[(&str, u32)]; 6] = [
        &[("a", 4), ("b", 5)], // 4 + 5 > 8 slots: refused at b, a's tokens and slots given back
        &[("a", 5), ("b", 0)], // a's whole burst (so its 4 tokens came back); b only checks
        &[("a", 1)],           // a's burst is empty now
        &[("b", 6)],           // more than the burst of 5: exceeds, nothing charged
        &[("b", 3), ("c", 6)], // c exceeds: b is given back
        &[("b", 3), ("c", 1)], // 5 + 3 + 1 > 8 slots: refused at c, b is given back
    ];
    for (i, items) in steps.iter().enumerate() {
        let on = |c| items.iter().map(|&(p, n)| (k(c, p), n)).collect::<Vec<_>>();
        let got = redis.admit_all(&on(rc)).await;
        let want = embedded.admit_all(&on(ec));
        assert_eq!(
            got.map_err(|r| (r.index, r.decision.outcome())),
            want.map_err(|r| (r.index, r.decision.outcome())),
            "step {i}: {items:?}"
        );
        if let (Err(g), Err(w)) = (got, want) {
            assert_eq!(
                g.decision.retry_after().is_some(),
                w.decision.retry_after().is_some()
            );
        }
    }
    // What the steps above must have been, so that the comparison is not vacuous.
    let check = redis.admit_all(&[(k(rc, "a"), 1)]).await.unwrap_err();
    assert!(matches!(
        check.decision,
        Decision::Throttle {
            bucket: BucketKind::Burst,
            ..
        }
    ));
    // 5 slots are held (a's 5): had b's refunds been lost, these 3 would not fit.
    assert_eq!(redis.admit_n(&k(rc, "d"), 3).await, Decision::Admit);
    let over = redis.admit_n(&k(rc, "e"), 1).await;
    assert!(
        matches!(
            over,
            Decision::Unavailable {
                cause: Cause::TenantShare,
                retry_after: Some(_)
            }
        ),
        "all 8 slots are held: {over:?}"
    );
    // A cost above a whole window's slots (with buckets that would hold it): no made-up wait.
    let mut wide =
        Profile::from_yaml(&CAPACITY.replace("tokens: 5, per: 1h", "tokens: 50, per: 1h")).unwrap();
    wide.store.timeout = Period::from_secs(5).unwrap();
    let wide = RedisLimiter::builder(&server.url(), wide)
        .key_secret(b"test")
        .key_prefix("wide")
        .connect()
        .await
        .unwrap();
    let never = wide
        .admit_n(&k(wide.route_class("c0").unwrap(), "f"), 9)
        .await;
    assert_eq!(
        never,
        Decision::Unavailable {
            retry_after: None,
            cause: Cause::TenantShare
        }
    );
}
