//! A flood of new anonymous identities through the demo gateway over loopback: a flood of `POST /v1/register` from random /24s
//! behind a trusted proxy, with the example profile as it is but a small table, never refuses
//! a tenant's caller; the anonymous callers alone fail closed at their cap of the table.

use std::time::Duration;

use http::{Method, StatusCode};
use tollgate::profile::Capacity;
use tollgate::quanta::Clock;
use tollgate::Profile;

use crate::tcp::{start, ALICE, CAROL};

/// 1,024 slots: the anonymous pseudo-tenant may hold 512 (default `identities.tenant_share`).
const SLOTS: u64 = 1_024;

#[tokio::test]
async fn register_flood_behind_a_proxy_never_locks_out_a_tenant() {
    let mut p = Profile::from_path(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/profiles/example.yaml"
    ))
    .unwrap();
    p.identities.capacity = Capacity::new(SLOTS).unwrap();
    let (clock, mock) = Clock::mock();
    let gw = start(p, Some(clock), &["127.0.0.0/8"]).await;
    let (mut created, mut refused) = (0u32, 0u32);
    for i in 0..2_000u32 {
        let ip = format!("10.{}.{}.7", i >> 8, i & 255);
        let r = gw
            .send(Method::POST, "/v1/register", &[("x-forwarded-for", &ip)])
            .await;
        match r.status {
            StatusCode::CREATED => created += 1,
            StatusCode::SERVICE_UNAVAILABLE => {
                // TableFull is an `over_capacity` refusal in the catalog.
                assert_eq!(r.json()["code"], "over_capacity", "{ip}: {}", r.json());
                refused += 1;
            }
            s => panic!("flood request {i} got {s}"),
        }
        if i % 20 == 0 {
            // 2,000 flood requests a second on the mock clock.
            mock.increment(Duration::from_millis(10));
        }
        if i % 100 == 0 {
            // Each tenant asks every 50 ms: full again between requests (50/s), so its slot
            // is reclaimable, as the light live callers of the break were.
            for (who, auth) in [("alice", ALICE), ("carol", CAROL)] {
                let r = gw
                    .send(Method::GET, "/v1/items", &[("authorization", auth)])
                    .await;
                assert_eq!(r.status, StatusCode::OK, "{who} at flood request {i}");
            }
        }
    }
    eprintln!("register flood: {created} created, {refused} refused 503");
    assert!(created <= SLOTS as u32 / 2, "{created}");
    assert!(refused >= 1_400, "{refused}");
}
