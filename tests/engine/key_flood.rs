//! A flood of new identities (ten times `identities.capacity`) while a set of live identities
//! keeps its traffic, on the mock clock: memory never grows, no live identity's state is ever
//! reset (each is throttled exactly as the reference model says), new identities beyond the
//! table's capacity fail closed (`Unavailable { TableFull }`) until slots refill and are
//! reclaimed, and no identity is admitted more than its buckets allow.

use tollgate_testkit as common;

use std::time::Duration;

use common::{mock_limiter, profile, ClassSpec, Model};
use tollgate::profile::Share;
use tollgate::{Cause, Decision, Key};

const CAPACITY: usize = 1024;
const LIVE: usize = 100;
/// Burst 2 per 1 s, sustained 10 per 60 s: one admission keeps an identity's slot for 6 s.
const SPEC: ClassSpec = (2, 1_000, 10, 60_000);
const TABLE_FULL: Decision = Decision::Unavailable {
    retry_after: None,
    cause: Cause::TableFull,
};

#[test]
fn key_flood_fails_closed_and_never_resets_live_identities() {
    // One tenant that may hold the whole table: this is the table's own fail-closed rule (the
    // partitions' caps are tested below).
    let mut p = profile(CAPACITY as u64, &[SPEC]);
    p.identities.tenant_share = Share::new(1.0).unwrap();
    let (limiter, mock) = mock_limiter(p);
    let class = limiter.route_class("c0").unwrap();
    let memory = limiter.memory_bytes();
    let mut model = Model::default();
    let mut now = 0u64;
    let live: Vec<String> = (0..LIVE).map(|i| format!("live-{i}")).collect();
    let mut flood = 0usize;
    let (mut flood_admitted, mut flood_full, mut live_admitted) = (0, 0, 0);
    // Admits `who` and checks it against the model; `busy` is the number of identities the
    // model says hold a slot (not full), at least all but `who`.
    let step = |model: &mut Model, who: &str, now: u64, busy: usize| -> Decision {
        let got = limiter.admit(&Key::authenticated("t", who, class).unwrap());
        if got == TABLE_FULL {
            // Only an identity with nothing to lose may be refused a slot.
            assert!(model.is_full(who, 0, now), "{who} lost its slot at {now}");
        } else {
            if busy >= CAPACITY && model.is_full(who, 0, now) {
                panic!("{who} got a slot while {busy} identities hold all {CAPACITY}: {got:?}");
            }
            assert_eq!(got, model.admit(who, 0, SPEC, now), "{who} at {now}");
        }
        assert_eq!(limiter.memory_bytes(), memory);
        got
    };
    // Phase 1: every 10 ms each live identity asks, 20 new identities arrive, and 5 earlier
    // flood identities come back: 10 x capacity new identities in 5.12 s, about twice what the
    // table holds in the 6 s each keeps its slot.
    let mut round = 0u64;
    while flood < 10 * CAPACITY {
        let mut busy = model.busy_identities(now, ("", usize::MAX));
        for who in &live {
            if step(&mut model, who, now, busy).is_admit() {
                live_admitted += 1;
            }
        }
        for _ in 0..20 {
            let who = format!("new-{flood}");
            flood += 1;
            match step(&mut model, &who, now, busy) {
                Decision::Admit => {
                    flood_admitted += 1;
                    busy += 1;
                }
                TABLE_FULL => flood_full += 1,
                d => panic!("a new identity got {d:?}"),
            }
        }
        for k in 0..5 {
            let who = format!("new-{}", (round * 7919 + k * 104_729) % flood as u64);
            step(&mut model, &who, now, busy);
        }
        round += 1;
        mock.increment(Duration::from_millis(10));
        now += 10_000_000;
    }
    eprintln!(
        "flood: {flood_admitted} admitted, {flood_full} TableFull; live: {live_admitted} admitted"
    );
    assert!(flood_full > 1_000, "the flood never filled the table");
    assert!(flood_admitted >= CAPACITY - LIVE);
    // Phase 2: 7 s later every flood identity has refilled; the live ones kept asking (once a
    // second, enough to stay in debt). New identities get the refilled slots again.
    for _ in 0..7 {
        mock.increment(Duration::from_secs(1));
        now += 1_000_000_000;
        let busy = model.busy_identities(now, ("", usize::MAX));
        for who in &live {
            step(&mut model, who, now, busy);
        }
    }
    // Busy now: the live identities and the flood identities that came back often enough to
    // still owe (their comebacks were admitted as the model says); everything else refilled.
    let mut busy = model.busy_identities(now, ("", usize::MAX));
    assert!((LIVE..CAPACITY / 2 + LIVE).contains(&busy), "{busy}");
    let mut late_admitted = 0;
    for i in 0..CAPACITY / 4 {
        let who = format!("late-{i}");
        if step(&mut model, &who, now, busy) == Decision::Admit {
            late_admitted += 1;
            busy += 1;
        }
    }
    eprintln!(
        "after the refill: {late_admitted} of {} new identities admitted",
        CAPACITY / 4
    );
    assert!(
        late_admitted > CAPACITY / 8,
        "refilled slots were not reclaimed"
    );
    // And every live identity is still exactly where the model has it.
    for who in &live {
        step(&mut model, who, now, busy);
    }
}

// A flood of new identities in one partition (the anonymous
// pseudo-tenant, or one tenant minting principals) must never refuse another partition's
// identity. The example profile as it is (default `identities.tenant_share`, 0.5), with the
// a 16,384-slot table, small enough for the flood to fill its partition's share.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use tollgate::{Limiter, Profile};

const B3_SLOTS: u64 = 16_384;

fn flood_limiter() -> (Limiter, std::sync::Arc<tollgate::quanta::Mock>) {
    let mut p = Profile::from_path("examples/profiles/example.yaml").unwrap();
    p.identities.capacity = tollgate::profile::Capacity::new(B3_SLOTS).unwrap();
    mock_limiter(p)
}

/// Flood identities at 2,000/s (`flood(i)` is the i-th), for `secs` seconds on the mock clock,
/// while acme's and globex's live callers each ask every 100 ms on the `read` class (50/s: full
/// again between requests, so their slots are reclaimable) and each tenant also brings a new
/// principal every 100 ms. Returns (flood admitted, flood refused TableFull). Panics if a
/// tenant's request is refused for any reason.
fn flood_of_new_identities(
    l: &Limiter,
    mock: &tollgate::quanta::Mock,
    secs: u64,
    flood: impl Fn(u64) -> Key<'static>,
) -> (u64, u64) {
    let read = l.route_class("read").unwrap();
    let (mut admitted, mut full) = (0, 0);
    for tick in 0..secs * 10 {
        for i in 0..200 {
            match l.admit(&flood(tick * 200 + i)) {
                Decision::Admit => admitted += 1,
                TABLE_FULL => full += 1,
                // The anonymous share of a shard's admissions, or a minted principal's bucket.
                Decision::Unavailable {
                    cause: Cause::TenantShare,
                    ..
                }
                | Decision::Throttle { .. } => {}
                d => panic!("a flood identity got {d:?}"),
            }
        }
        for tenant in ["acme", "globex"] {
            let live = Key::authenticated(tenant, "live", read).unwrap();
            assert_eq!(
                l.admit(&live),
                Decision::Admit,
                "{tenant}'s live caller at tick {tick}"
            );
            let new = format!("new-{tick}");
            let new = Key::authenticated(tenant, &new, read).unwrap();
            assert_eq!(
                l.admit(&new),
                Decision::Admit,
                "{tenant}'s new principal at tick {tick}"
            );
        }
        mock.increment(Duration::from_millis(100));
    }
    (admitted, full)
}

fn anonymous_v4(i: u64) -> IpAddr {
    // A different /24 each time.
    IpAddr::V4(Ipv4Addr::from((0x0a00_0000 + i as u32 * 256).to_be_bytes()))
}

#[test]
fn anonymous_flood_never_locks_out_a_tenant() {
    let (l, mock) = flood_limiter();
    let register = l.route_class("registration").unwrap();
    // 20 s at 2,000/s: 40,000 /24s, more than twice the table; each holds its slot 72 min.
    let (admitted, full) =
        flood_of_new_identities(&l, &mock, 20, |i| Key::anonymous(anonymous_v4(i), register));
    eprintln!("anonymous IPv4 flood: {admitted} admitted, {full} TableFull");
    // The anonymous partition stops at its cap (half the table) and fails closed, alone.
    assert!(admitted <= B3_SLOTS / 2, "{admitted}");
    assert!(admitted > B3_SLOTS / 2 - 1_000, "{admitted}");
    assert!(full > 20_000, "{full}");
    // After the flood: still nobody else is refused, and the flood stays at its cap.
    flood_of_new_identities(&l, &mock, 2, |i| {
        Key::anonymous(anonymous_v4(1_000_000 + i), register)
    });
}

#[test]
fn anonymous_ipv6_flood_without_a_proxy_never_locks_out_a_tenant() {
    let (l, mock) = flood_limiter();
    let register = l.route_class("registration").unwrap();
    // A different /56 each time (cheap to have many of).
    let v6 = |i: u64| {
        IpAddr::V6(Ipv6Addr::from(
            (0x2001_0db8u128 << 96) | u128::from(i) << 72,
        ))
    };
    let (admitted, full) =
        flood_of_new_identities(&l, &mock, 15, |i| Key::anonymous(v6(i), register));
    eprintln!("anonymous IPv6 flood: {admitted} admitted, {full} TableFull");
    assert!(
        admitted <= B3_SLOTS / 2 && full > 10_000,
        "{admitted} {full}"
    );
}

#[test]
fn one_tenant_minting_principals_never_locks_out_another() {
    let (l, mock) = flood_limiter();
    let register = l.route_class("registration").unwrap();
    let names: Vec<&'static str> = (0..30_000u64)
        .map(|i| &*Box::leak(format!("minted-{i}").into_boxed_str()))
        .collect();
    let (admitted, full) = flood_of_new_identities(&l, &mock, 15, |i| {
        Key::authenticated("initech", names[i as usize], register).unwrap()
    });
    eprintln!("one tenant minting principals: {admitted} admitted, {full} TableFull");
    // initech (unlisted, weight 1) holds at most half the table; its refusals are its own.
    assert!(
        admitted <= B3_SLOTS / 2 && full > 10_000,
        "{admitted} {full}"
    );
}

/// A flood must not take tenants' capacity counters either: a tenant's capacity counter used to live in the identity table
/// and became reclaimable at every window end, so a new identity could take it and the
/// tenant's next admission found no slot for its counter (`503` with its buckets fine). Now
/// counters live in a table of their own: a table full of live identities still admits them.
#[test]
fn tenant_counters_never_compete_with_identities() {
    let p = Profile::from_yaml(
        "name: counters\nidentities: { capacity: 64, tenant_share: 1 }\nroute_classes:\n  c:\n    \
         burst: { tokens: 5, per: 1s }\n    sustained: { tokens: 100, per: 1h }\n\
         shared_capacity: { shards: 1, window: 1s, slots_per_window: 1000, tenant_share: 1 }\n",
    )
    .unwrap();
    let (l, mock) = mock_limiter(p);
    let c = l.route_class("c").unwrap();
    let names: Vec<String> = (0..200).map(|i| format!("p{i}")).collect();
    fn key(n: &str, c: tollgate::RouteClass) -> Key<'_> {
        Key::authenticated("acme", n, c).unwrap()
    }
    // Fill the table with live identities (each owes 36 s of its sustained bucket).
    let live: Vec<&String> = names
        .iter()
        .filter(|n| l.admit(&key(n, c)) == Decision::Admit)
        .collect();
    assert!(live.len() >= 48, "{}", live.len());
    for _ in 0..3 {
        // A window ends; new identities find no slot (every one is live) ...
        mock.increment(Duration::from_secs(1));
        for n in &names {
            if !live.contains(&n) {
                assert_eq!(l.admit(&key(n, c)), TABLE_FULL, "{n}");
            }
        }
        // ... and every live identity is still admitted, its counter found.
        for n in &live {
            assert_eq!(l.admit(&key(n, c)), Decision::Admit, "{n}");
        }
    }
}

/// Tenants of one caller each, coming and going for good: many more tenants than the tenants'
/// table has entries, and more than the identity table has slots. Each tenant's slot goes idle
/// (refilled) and stays in the table, counted for its tenant, until a new identity takes it; a
/// tenant new to the service is admitted all the same.
#[test]
fn tenants_new_to_the_service_are_admitted_however_many_came_before() {
    let mut p = Profile::from_path("examples/profiles/example.yaml").unwrap();
    p.identities.capacity = tollgate::profile::Capacity::new(1024).unwrap();
    let (l, mock) = mock_limiter(p);
    let read = l.route_class("read").unwrap();
    // The tenants' table has 64 entries here; 40 rounds of 60 bring 2,400 tenants.
    for round in 0..40 {
        for i in 0..60 {
            let tenant = format!("tenant-{round}-{i}");
            let key = Key::authenticated(&tenant, "only", read).unwrap();
            assert_eq!(l.admit(&key), Decision::Admit, "{tenant}");
        }
        mock.increment(Duration::from_secs(3_600));
    }
}
