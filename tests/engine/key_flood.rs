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
