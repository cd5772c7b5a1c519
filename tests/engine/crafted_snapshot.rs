//! State files that are well formed (real header, checksums right) but hostile in what they
//! hold: one partition claiming the whole table, debts of years. A restore holds each partition
//! to its share of the table and each debt to a full bucket of the profile restored into, and
//! counts what it left out or clipped.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tollgate::quanta::Clock;
use tollgate::{Decision, Key, Limiter, Profile};

const SECRET: &[u8] = b"crafted-snapshot-secret";
const SLOTS: u64 = 1024;

/// 1024 identity slots, the default tenant share (0.5: 512 slots a partition), one class of
/// 10 per second and 100 per minute.
fn profile() -> Profile {
    Profile::from_yaml(&format!(
        r#"
name: crafted
identities: {{ capacity: {SLOTS} }}
route_classes:
  read:
    burst:     {{ tokens: 10,  per: 1s }}
    sustained: {{ tokens: 100, per: 1m }}
"#
    ))
    .unwrap()
}

fn wall() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_790_000_000)
}

fn limiter_with(restore: Option<&[u8]>) -> (Limiter, Option<tollgate::snapshot::RestoreStats>) {
    let (clock, _mock) = Clock::mock();
    let b = Limiter::builder(profile())
        .clock(clock)
        .key_secret(SECRET)
        .wall_clock(wall);
    match restore {
        Some(bytes) => {
            let (l, s) = b.restore(bytes).unwrap();
            (l, Some(s))
        }
        None => (b.build().unwrap(), None),
    }
}

/// The header of a real snapshot of this profile (one of no records: header, then the 16
/// bytes of the end).
fn real_header() -> Vec<u8> {
    let (l, _) = limiter_with(None);
    let mut snap = Vec::new();
    l.snapshot(&mut snap).unwrap();
    snap.truncate(snap.len() - 16);
    snap
}

/// A version 2 record: slot, class 0, digest, partition, the two debts (ns).
fn record(slot: u32, digest: (u64, u64), partition: (u64, u64), debt: u64) -> Vec<u8> {
    let mut r = Vec::with_capacity(54);
    r.extend(slot.to_le_bytes());
    r.extend(0u16.to_le_bytes());
    for x in [digest.0, digest.1, partition.0, partition.1, debt, debt] {
        r.extend(x.to_le_bytes());
    }
    r
}

/// A file of `records` after a real header, its end and checksum recomputed.
fn file(records: &[Vec<u8>]) -> Vec<u8> {
    let mut f = real_header();
    for r in records {
        f.extend(r);
    }
    f.extend(u32::MAX.to_le_bytes());
    f.extend((records.len() as u64).to_le_bytes());
    let crc = crc32fast::hash(&f);
    f.extend(crc.to_le_bytes());
    f
}

/// A digest whose home slot is `slot` (home = `lo * slots >> 64`), odd as tollgate's are.
fn at_home(slot: u64, hi: u64) -> (u64, u64) {
    (hi, (slot << 54) | 1)
}

/// 2^56 ns, the largest debt a record may give: 2.3 years.
const YEARS: u64 = 1 << 56;

/// The break: every slot for one fake partition, each owing 2.3 years. Before, all 1024 were
/// restored and every tenant and anonymous caller then got `TableFull`; now the partition
/// gets at most its share of the table and of every window, the rest start full (counted),
/// and the debts are a full bucket's at most.
#[test]
fn one_partition_cannot_take_the_whole_table_from_a_state_file() {
    let fake = (0xfa4e, 0x0bad_0001);
    let records: Vec<_> = (0..SLOTS as u32)
        .map(|i| record(i, at_home(u64::from(i), 7), fake, YEARS))
        .collect();
    let (l, stats) = limiter_with(Some(&file(&records)));
    let stats = stats.unwrap();
    // At most half of every 64-slot window (the table's windows wrap, so a little less than
    // half of the table in all), each debt clipped to a full bucket.
    assert!((448..=512).contains(&stats.restored), "{stats:?}");
    assert_eq!(stats.over_share, SLOTS - stats.restored, "{stats:?}");
    assert_eq!(stats.clipped, stats.restored, "{stats:?}");
    let read = l.route_class("read").unwrap();
    for i in 0..50 {
        let user = format!("user-{i}");
        let tenant = Key::authenticated("acme", &user, read).unwrap();
        assert_eq!(l.admit(&tenant), Decision::Admit, "tenant caller {i}");
        let ip = format!("198.51.{i}.7").parse().unwrap();
        assert_eq!(
            l.admit(&Key::anonymous(ip, read)),
            Decision::Admit,
            "anonymous {i}"
        );
    }
}

/// A real identity whose debts a file sets to 2.3 years: restored owing one full bucket of
/// each (10 tokens of 100 ms, 100 of 600 ms), so it waits at most a minute, not years.
#[test]
fn a_debt_beyond_a_full_bucket_is_clipped_to_it() {
    let (l, _) = limiter_with(None);
    let read = l.route_class("read").unwrap();
    let alice = Key::authenticated("acme", "alice", read).unwrap();
    assert_eq!(l.admit(&alice), Decision::Admit);
    let mut snap = Vec::new();
    l.snapshot(&mut snap).unwrap();
    // One record: its two debts are its last 16 bytes before the end (16 bytes).
    let n = snap.len();
    snap.truncate(n - 4);
    for at in [n - 32, n - 24] {
        snap[at..at + 8].copy_from_slice(&YEARS.to_le_bytes());
    }
    let crc = crc32fast::hash(&snap);
    snap.extend(crc.to_le_bytes());

    let (l, stats) = limiter_with(Some(&snap));
    let stats = stats.unwrap();
    assert_eq!((stats.restored, stats.clipped), (1, 1), "{stats:?}");
    match l.admit(&alice) {
        Decision::Throttle { retry_after, .. } => {
            assert_eq!(
                retry_after,
                Duration::from_millis(600),
                "one sustained token"
            )
        }
        other => panic!("a full bucket's debt refuses: {other:?}"),
    }
}

/// A file within the profile's bounds is restored as it is: nothing clipped or left out.
#[test]
fn a_real_snapshot_is_neither_clipped_nor_over_share() {
    let (l, _) = limiter_with(None);
    let read = l.route_class("read").unwrap();
    for i in 0..40 {
        let user = format!("u{i}");
        let k = Key::authenticated("acme", &user, read).unwrap();
        for _ in 0..10 {
            assert_eq!(l.admit(&k), Decision::Admit);
        }
    }
    let mut snap = Vec::new();
    l.snapshot(&mut snap).unwrap();
    let (_, stats) = limiter_with(Some(&snap));
    let stats = stats.unwrap();
    assert_eq!(
        (stats.restored, stats.clipped, stats.over_share),
        (40, 0, 0)
    );
}
