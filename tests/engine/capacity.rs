//! Shared capacity and fairness: two tenants on one shard, shard and share refusals, the
//! all-or-nothing charge, Retry-After to the next window, reload, shadow mode, discovery.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use tollgate::quanta::Clock;
use tollgate::{BucketKind, Cause, Decision, Key, Limiter, Profile};

/// One shard, `slots` per 1 s window, the given share; `acme` weighted 1.5 when `listed`.
fn profile(slots: u64, share: f64, burst: u64, extra: &str) -> Profile {
    Profile::from_yaml(&format!(
        "name: cap\nidentities: {{ capacity: 4096 }}\n{extra}route_classes:\n  read:\n    \
         burst: {{ tokens: {burst}, per: 1s }}\n    sustained: {{ tokens: 1000000, per: 1h }}\n\
         shared_capacity:\n  shards: 1\n  window: 1s\n  slots_per_window: {slots}\n  \
         tenant_share: {share}\n"
    ))
    .unwrap()
}

fn limiter(p: Profile) -> (Limiter, Arc<tollgate::quanta::Mock>) {
    let (clock, mock) = Clock::mock();
    (
        Limiter::builder(p)
            .clock(clock)
            .key_secret(b"cap")
            .build()
            .unwrap(),
        mock,
    )
}

fn key<'a>(l: &Limiter, tenant: &'a str, principal: &'a str) -> Key<'a> {
    Key::authenticated(tenant, principal, l.route_class("read").unwrap()).unwrap()
}

#[test]
fn a_flooding_tenant_cannot_starve_a_quiet_one() {
    // The example profile's shape scaled down: 40 slots a window, share 0.5.
    let (l, mock) = limiter(profile(40, 0.5, 1_000, ""));
    for window in 0..5 {
        let mut flood = 0;
        for i in 0..200 {
            // The flood spreads over principals, so only capacity can stop it.
            if l.admit(&key(&l, "flood", &format!("bot-{i}"))).is_admit() {
                flood += 1;
            }
        }
        assert_eq!(
            flood, 20,
            "window {window}: the flood holds exactly its share"
        );
        // The quiet tenant, arriving after the flood, still gets its whole share.
        let quiet = (0..20)
            .filter(|_| l.admit(&key(&l, "quiet", "alice")).is_admit())
            .count();
        assert_eq!(quiet, 20, "window {window}");
        let over = l.admit(&key(&l, "quiet", "alice"));
        assert!(matches!(
            over,
            Decision::Unavailable {
                cause: Cause::TenantShare | Cause::ShardFull,
                ..
            }
        ));
        mock.increment(Duration::from_secs(1));
    }
}

#[test]
fn capacity_refusals_cost_no_personal_tokens() {
    let (l, mock) = limiter(profile(10, 0.5, 100, ""));
    let k = key(&l, "flood", "bot");
    for _ in 0..5 {
        assert_eq!(l.admit(&k), Decision::Admit);
    }
    let before = l.remaining(&k);
    assert_eq!(before.burst, 95);
    for _ in 0..50 {
        let d = l.admit(&k);
        assert_eq!(
            d,
            Decision::Unavailable {
                retry_after: Some(Duration::from_secs(1)),
                cause: Cause::TenantShare
            }
        );
        assert_eq!(d.http_status(), 503);
    }
    assert_eq!(l.remaining(&k), before, "503s spent personal tokens");
    // And a 429 takes no slot: a tenant whose buckets are empty leaves the shard alone.
    let (l, _) = limiter(profile(10, 1.0, 2, ""));
    let k = key(&l, "t", "p");
    assert!(l.admit(&k).is_admit() && l.admit(&k).is_admit());
    for _ in 0..20 {
        assert!(matches!(
            l.admit(&k),
            Decision::Throttle {
                bucket: BucketKind::Burst,
                ..
            }
        ));
    }
    let others = (0..20)
        .filter(|i| l.admit(&key(&l, "t", &format!("o{i}"))).is_admit())
        .count();
    assert_eq!(others, 8, "the 429s took shard slots");
    let _ = mock;
}

#[test]
fn a_full_shard_refuses_everyone_with_the_same_wait() {
    let (l, mock) = limiter(profile(10, 0.5, 100, ""));
    mock.increment(Duration::from_millis(250));
    for t in ["a", "b"] {
        for _ in 0..5 {
            assert_eq!(l.admit(&key(&l, t, "p")), Decision::Admit);
        }
    }
    let want = Decision::Unavailable {
        retry_after: Some(Duration::from_millis(750)),
        cause: Cause::ShardFull,
    };
    assert_eq!(l.admit(&key(&l, "c", "p")), want);
    assert_eq!(l.peek(&key(&l, "c", "p")), want);
    assert_eq!(
        l.admit(&key(&l, "d", "q")),
        want,
        "the wait is the same for every tenant"
    );
    assert_eq!(
        l.admit(&key(&l, "a", "p")).retry_after(),
        Some(Duration::from_millis(750))
    );
    // The next window opens at the announced instant.
    mock.increment(Duration::from_millis(749));
    assert!(!l.admit(&key(&l, "c", "p")).is_admit());
    mock.increment(Duration::from_millis(1));
    assert_eq!(l.admit(&key(&l, "c", "p")), Decision::Admit);
}

#[test]
fn listed_tenants_have_weights_and_pinned_shards() {
    let p = Profile::from_yaml(
        "name: w\nidentities: { capacity: 4096 }\nroute_classes:\n  read:\n    burst: { tokens: 1000, per: 1s }\n    \
         sustained: { tokens: 100000, per: 1h }\nshared_capacity:\n  shards: 4\n  window: 1s\n  \
         slots_per_window: 40\n  tenant_share: 0.5\n  tenants:\n    acme: { weight: 1.5, shard: 2 }\n    \
         globex: { shard: 2 }\n",
    )
    .unwrap();
    let (l, _) = limiter(p);
    let acme = (0..100)
        .filter(|i| l.admit(&key(&l, "acme", &format!("u{i}"))).is_admit())
        .count();
    assert_eq!(acme, 30, "ceil(40 * 0.5 * 1.5)");
    // globex shares shard 2 with acme: only the 10 slots acme left.
    let globex = (0..100)
        .filter(|i| l.admit(&key(&l, "globex", &format!("u{i}"))).is_admit())
        .count();
    assert_eq!(globex, 10);
    assert_eq!(
        l.admit(&key(&l, "globex", "x")),
        Decision::Unavailable {
            retry_after: Some(Duration::from_secs(1)),
            cause: Cause::ShardFull
        }
    );
}

#[test]
fn anonymous_traffic_is_one_pseudo_tenant() {
    let (l, _) = limiter(profile(10, 0.5, 100, ""));
    let c = l.route_class("read").unwrap();
    let mut admitted = 0;
    for i in 0..50u8 {
        let ip = std::net::IpAddr::from([10, i, 0, 1]);
        if l.admit(&Key::anonymous(ip, c)).is_admit() {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted, 5,
        "all anonymous networks together hold one tenant's share"
    );
    assert_eq!(l.admit(&key(&l, "acme", "p")), Decision::Admit);
}

/// 2 threads, 2 tenants on one shard, windows moved by the mock clock between phases so that
/// every admission's window is known: no window ever exceeds its slots, the flood never exceeds
/// its share, and the quiet tenant gets its whole share every window. Bounded to 10 seconds.
#[test]
fn stress_two_threads_two_tenants_one_shard() {
    const SLOTS: u64 = 1_000;
    let (l, mock) = limiter(profile(SLOTS, 0.5, 1_000_000, ""));
    let l = Arc::new(l);
    let barrier = Arc::new(Barrier::new(3));
    let stop = Arc::new(AtomicU64::new(0));
    let (flood_n, quiet_n) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let spawn = |tenant: &'static str, attempts: u64, n: Arc<AtomicU64>| {
        let (l, barrier, stop) = (l.clone(), barrier.clone(), stop.clone());
        std::thread::spawn(move || loop {
            barrier.wait();
            if stop.load(Ordering::SeqCst) == 1 {
                return;
            }
            let k = key(&l, tenant, "p");
            let got = (0..attempts).filter(|_| l.admit(&k).is_admit()).count() as u64;
            n.store(got, Ordering::SeqCst);
            barrier.wait();
        })
    };
    let flood = spawn("flood", 3 * SLOTS, flood_n.clone());
    let quiet = spawn("quiet", SLOTS / 2, quiet_n.clone());
    let start = Instant::now();
    let mut windows = 0;
    while start.elapsed() < Duration::from_secs(10) && windows < 2_000 {
        barrier.wait(); // both threads admit in this window
        barrier.wait(); // both done
        let (f, q) = (
            flood_n.load(Ordering::SeqCst),
            quiet_n.load(Ordering::SeqCst),
        );
        assert!(f + q <= SLOTS, "window {windows}: {f} + {q} > {SLOTS}");
        assert!(f <= SLOTS / 2, "window {windows}: the flood held {f}");
        assert_eq!(q, SLOTS / 2, "window {windows}: the quiet tenant got {q}");
        mock.increment(Duration::from_secs(1));
        windows += 1;
    }
    stop.store(1, Ordering::SeqCst);
    barrier.wait();
    flood.join().unwrap();
    quiet.join().unwrap();
    assert!(windows >= 10, "only {windows} windows ran");
}

#[test]
fn reload_swaps_limits_and_keeps_state() {
    let (l, mock) = limiter(profile(1000, 1.0, 10, ""));
    let read = l.route_class("read").unwrap();
    let k = key(&l, "t", "p");
    for _ in 0..4 {
        assert!(l.admit(&k).is_admit());
    }
    assert_eq!(l.remaining(&k).burst, 6);
    // A bigger burst: the 4 tokens still owed carry over (in tokens, not time).
    let mut p2 = profile(1000, 1.0, 20, "");
    let write =
        "  write:\n    burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 5, per: 1h }\n";
    p2 = Profile::from_yaml(
        &serde_yaml_ng::to_string(&p2)
            .unwrap()
            .replace("route_classes:\n", &format!("route_classes:\n{write}")),
    )
    .unwrap();
    l.reload(p2).unwrap();
    assert_eq!(
        l.route_class("read"),
        Some(read),
        "handles survive a reload"
    );
    assert_eq!(
        l.route_class("write").map(|c| c.index()),
        Some(1),
        "new classes come after"
    );
    // 4 tokens of 100 ms owed are 4 of the new 50 ms tokens (200 ms): 16 of 20 left.
    assert_eq!(l.remaining(&k).burst, 16);
    // Dropping the `write` class is refused.
    l.reload(profile(1000, 1.0, 2, "")).unwrap_err();
    // A smaller bucket: the 4 tokens still owed carry over in full (no clamp, which would
    // forgive one of them), 4 * 33.333334 ms = 133.333336 ms, so the next token comes once the
    // debt is down to `tau - t` of the new bucket: 133.333336 ms - (100 ms + 2 ns -
    // 33.333334 ms) = 66.666668 ms.
    let p3 = serde_yaml_ng::to_string(&*l.profile()).unwrap();
    let p3 = p3.replacen(
        "tokens: 20\n      per: 1s",
        "tokens: 3\n      per: 100ms",
        1,
    );
    assert!(p3.contains("per: 100ms"), "{p3}");
    l.reload(Profile::from_yaml(&p3).unwrap()).unwrap();
    assert_eq!(l.remaining(&k).burst, 0);
    assert_eq!(
        l.admit(&k),
        Decision::Throttle {
            retry_after: Duration::from_nanos(66_666_668),
            bucket: BucketKind::Burst
        }
    );
    mock.increment(Duration::from_nanos(66_666_667));
    assert_eq!(l.remaining(&k).burst, 0);
    assert!(!l.admit(&k).is_admit());
    mock.increment(Duration::from_nanos(1));
    assert_eq!(l.remaining(&k).burst, 1);
    assert!(l.admit(&k).is_admit());
}

#[test]
fn bad_reloads_leave_the_old_profile_in_force() {
    let (l, _) = limiter(profile(10, 0.5, 5, ""));
    let before = l.profile();
    let bigger = Profile::from_yaml(
        &serde_yaml_ng::to_string(&*before)
            .unwrap()
            .replace("capacity: 4096", "capacity: 8192"),
    )
    .unwrap();
    let e = l.reload(bigger).unwrap_err();
    assert!(
        e.message().contains("identities.capacity") && e.message().contains("new Limiter"),
        "{e}"
    );
    let renamed = Profile::from_yaml(
        &serde_yaml_ng::to_string(&*before)
            .unwrap()
            .replace("read:", "reads:"),
    )
    .unwrap();
    let e = l.reload(renamed).unwrap_err();
    assert!(e.message().contains("route_classes.read"), "{e}");
    let anon = Profile::from_yaml(
        &serde_yaml_ng::to_string(&*before)
            .unwrap()
            .replace("ipv4_prefix: 24", "ipv4_prefix: 16"),
    )
    .unwrap();
    assert!(l.reload(anon).is_err());
    assert_eq!(*l.profile(), *before);
    for _ in 0..5 {
        assert!(l.admit(&key(&l, "t", "p")).is_admit());
    }
    assert!(!l.admit(&key(&l, "t", "p")).is_admit());
}

#[test]
fn shadow_mode_admits_and_reports() {
    let (l, _) = limiter(profile(100, 1.0, 2, "mode: shadow\n"));
    let k = key(&l, "t", "p");
    assert!(!l.evaluate(&k).is_shadowed());
    assert!(!l.evaluate(&k).is_shadowed());
    let v = l.evaluate(&k);
    assert_eq!(v.decision, Decision::Admit);
    assert!(matches!(
        v.computed,
        Decision::Throttle {
            bucket: BucketKind::Burst,
            ..
        }
    ));
    assert!(v.is_shadowed());
    assert_eq!(l.admit(&k), Decision::Admit);
    assert_eq!(l.peek(&k), Decision::Admit);
    // Per class: enforce overrides the profile's shadow.
    let p = Profile::from_yaml(
        &serde_yaml_ng::to_string(&*l.profile())
            .unwrap()
            .replace("  read:\n", "  read:\n    mode: enforce\n"),
    )
    .unwrap();
    l.reload(p).unwrap();
    assert!(matches!(l.admit(&k), Decision::Throttle { .. }));
}

#[test]
fn discovery_document_has_limits_and_nothing_private() {
    let p = Profile::from_path("examples/profiles/example.yaml").unwrap();
    let l = Limiter::builder(p).build().unwrap();
    for t in ["acme", "globex"] {
        l.admit(&Key::authenticated(t, "x", l.route_class("read").unwrap()).unwrap());
    }
    let doc = l.published_limits();
    let json = serde_json::to_string(&doc).unwrap();
    assert_eq!(doc.route_classes.len(), 4);
    assert_eq!(doc.route_classes[0].name, "read");
    assert_eq!(doc.route_classes[0].burst.tokens, 50);
    assert!(json.contains("\"per\":\"1h\""), "{json}");
    assert!(
        json.contains("rate_limited") && json.contains("\"window\":\"1s\""),
        "{json}"
    );
    for secret in [
        "acme",
        "globex",
        "weight",
        "shard",
        "slots",
        "\"capacity\"",
        "tenant",
        "used",
    ] {
        assert!(!json.contains(secret), "{secret} in {json}");
    }
}

/// A cost of exactly the tenant's cap fits an empty window, so when the tenant's share refuses
/// it the wait is the next window's (only a cost above the cap is refused with none).
#[test]
fn a_cost_of_the_whole_cap_waits_for_the_next_window() {
    // 10 slots, share 0.5: a cap of 5.
    let (l, mock) = limiter(profile(10, 0.5, 100, ""));
    mock.increment(Duration::from_millis(250));
    let k = key(&l, "t", "p");
    assert_eq!(l.admit(&k), Decision::Admit);
    assert_eq!(
        l.admit_n(&k, 5),
        Decision::Unavailable {
            retry_after: Some(Duration::from_millis(750)),
            cause: Cause::TenantShare
        }
    );
    mock.increment(Duration::from_millis(750));
    assert_eq!(l.admit_n(&k, 5), Decision::Admit);
}

/// A cost of exactly a shard's slots fits an empty window, so when a full shard refuses it the
/// wait is the next window's (only a cost above the slots is refused with none).
#[test]
fn a_cost_of_the_whole_shard_waits_for_the_next_window() {
    // 10 slots, share 1: every tenant may have all of them.
    let (l, mock) = limiter(profile(10, 1.0, 100, ""));
    mock.increment(Duration::from_millis(250));
    assert_eq!(l.admit(&key(&l, "a", "p")), Decision::Admit);
    let b = key(&l, "b", "p");
    assert_eq!(
        l.admit_n(&b, 10),
        Decision::Unavailable {
            retry_after: Some(Duration::from_millis(750)),
            cause: Cause::ShardFull
        }
    );
    mock.increment(Duration::from_millis(750));
    assert_eq!(l.admit_n(&b, 10), Decision::Admit);
}

/// Unlisted tenants are spread over the shards by their keyed hash: with 4 shards, 64 tenants
/// each asking for a whole shard's slots get exactly 4 of them (one a shard; all 64 hashing to
/// fewer shards has odds of about 4e-8, and the key secret is fixed).
#[test]
fn unlisted_tenants_spread_over_the_shards() {
    let p = profile(10, 1.0, 100, "");
    let four = serde_yaml_ng::to_string(&p)
        .unwrap()
        .replace("shards: 1", "shards: 4");
    let (l, _) = limiter(Profile::from_yaml(&four).unwrap());
    let admitted = (0..64)
        .filter(|t| l.admit_n(&key(&l, &format!("t{t}"), "p"), 10).is_admit())
        .count();
    assert_eq!(admitted, 4, "one tenant a shard holds all its slots");
}
