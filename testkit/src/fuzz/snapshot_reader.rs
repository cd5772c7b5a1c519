//! The `snapshot_reader` check: what `fuzz/fuzz_targets/snapshot_reader.rs` runs on every input,
//! and what `tests/engine/fuzz_corpus.rs` replays on stable over `fuzz/corpus/snapshot_reader/`.
//!
//! `Builder::restore` never panics on any bytes; it accepts or refuses, and a refusal hands
//! back a builder that still builds. An accepted snapshot restores into a limiter whose own
//! snapshot has the same records (the format round-trips: the wall clock is fixed at the Unix
//! epoch, so no time passes and no debt is paid down). Each input is also tried with its two
//! checksums recomputed, so that the checks behind them (records out of order, out of the
//! table, too far from home, owing too much, counts that disagree) are reached too.

use std::time::{Duration, UNIX_EPOCH};

use super::bytes::Bytes;
use tollgate::quanta::Clock;
use tollgate::{Key, Limiter, Profile};

/// The profile every input is restored under: 64 slots, two classes.
pub fn profile() -> Profile {
    Profile::from_yaml(
        r#"
name: fuzz-snapshot
identities: { capacity: 64 }
route_classes:
  a:
    burst:     { tokens: 3,  per: 1s }
    sustained: { tokens: 50, per: 1h }
  b:
    burst:     { tokens: 1,  per: 1m }
    sustained: { tokens: 20, per: 1d }
"#,
    )
    .expect("a valid profile")
}

/// The secret every input is restored under.
pub const SECRET: &[u8] = b"fuzz-snapshot-secret";

/// A valid snapshot under [`profile`] and [`SECRET`], made the same way every time (mock
/// clock, fixed wall clock, one thread): the corpus's `seed-valid` is this, and a test checks
/// that it still is (the version 2 format does not drift).
pub fn sample() -> Vec<u8> {
    let (clock, mock) = Clock::mock();
    let l = Limiter::builder(profile())
        .clock(clock)
        .key_secret(SECRET)
        .wall_clock(|| UNIX_EPOCH + Duration::from_secs(1_790_000_000))
        .build()
        .expect("builds");
    let (a, b) = (l.route_class("a").unwrap(), l.route_class("b").unwrap());
    for i in 0..12u32 {
        let p = format!("p{i}");
        let t = if i % 3 == 0 { "acme" } else { "globex" };
        for _ in 0..=(i % 4) {
            let _ = l.admit(&Key::authenticated(t, &p, a).unwrap());
        }
        let _ = l.admit(&Key::authenticated(t, &p, b).unwrap());
        mock.increment(Duration::from_millis(37));
    }
    let _ = l.admit(&Key::anonymous("192.0.2.7".parse().unwrap(), b));
    let mut out = Vec::new();
    l.snapshot(&mut out).expect("a Vec takes it");
    out
}

/// The format version `data` says it is (1 if it is too short to say).
fn version(data: &[u8]) -> u32 {
    data.get(8..12)
        .map_or(1, |v| u32::from_le_bytes(v.try_into().unwrap()))
}

/// The header's length (it ends with the wall clock and its checksum), if `data` has one.
fn header_len(data: &[u8]) -> Option<usize> {
    let count = u16::from_le_bytes(data.get(38..40)?.try_into().ok()?);
    // Version 2 gives each class its two emission intervals after its name.
    let intervals = if version(data) >= 2 { 16 } else { 0 };
    let mut at = 40;
    for _ in 0..count {
        at += 1 + usize::from(*data.get(at)?) + intervals;
    }
    Some(at + 12)
}

/// The records of a whole snapshot, each as its version 1 bytes (slot, digests, debts) and
/// its class (version 2; `u16::MAX`, not known, in version 1).
fn records(data: &[u8]) -> Vec<([u8; 52], u16)> {
    let (mut at, v2) = (header_len(data).unwrap(), version(data) >= 2);
    let mut out = Vec::new();
    while data[at..at + 4] != [0xFF; 4] {
        let mut r = [0; 52];
        r[..4].copy_from_slice(&data[at..at + 4]);
        let class = if v2 {
            u16::from_le_bytes([data[at + 4], data[at + 5]])
        } else {
            u16::MAX
        };
        let rest = at + if v2 { 6 } else { 4 };
        r[4..].copy_from_slice(&data[rest..rest + 48]);
        out.push((r, class));
        at = rest + 48;
    }
    out
}

/// `data` with its header and file checksums recomputed, where it is long enough to have them.
fn with_checksums_fixed(data: &[u8]) -> Option<Vec<u8>> {
    let h = header_len(data)?;
    if data.len() < h + 16 {
        return None;
    }
    let mut d = data.to_vec();
    let crc = crc32fast::hash(&d[..h - 4]).to_le_bytes();
    d[h - 4..h].copy_from_slice(&crc);
    let n = d.len();
    let crc = crc32fast::hash(&d[..n - 4]).to_le_bytes();
    d[n - 4..].copy_from_slice(&crc);
    Some(d)
}

/// Runs one input (as it is, with its checksums fixed, and read as the records of a file
/// with a real header: `restore_hostile`); panics on a failed check.
pub fn check(data: &[u8]) {
    restore_once(data);
    if let Some(fixed) = with_checksums_fixed(data) {
        restore_once(&fixed);
    }
    restore_hostile(data);
}

/// The profile's token counts, per class, burst then sustained (see [`profile`]).
const TOKENS: [[u64; 2]; 2] = [[3, 50], [1, 20]];

/// A full bucket's debt of each class (`tau = t * tokens`), from the intervals of a header.
fn taus(intervals: &[[u64; 2]]) -> Vec<[u64; 2]> {
    intervals
        .iter()
        .zip(TOKENS)
        .map(|(t, n)| [t[0] * n[0], t[1] * n[1]])
        .collect()
}

/// Structurally valid files with hostile contents: the header of [`sample`], then records the
/// input chooses (slots ascending, digests within their window, partitions from a pool of
/// three, classes known or not, debts from 0 to past what any bucket holds), the end and its
/// checksum right. Restored, no partition holds more than its share of the table (32 of 64
/// slots) and no debt is more than a full bucket of its class; a file of one partition leaves
/// room for every other caller.
fn restore_hostile(data: &[u8]) {
    let sample = sample();
    let header = &sample[..header_len(&sample).expect("the sample has a header")];
    let mut b = Bytes(data);
    let mut file = header.to_vec();
    let (mut slot, mut count, mut partitions) = (b.u8() % 4, 0u64, [false; 3]);
    const DEBTS: [u64; 8] = [
        0,
        1,
        999_999_999,
        1 << 30,
        1 << 40,
        1 << 50,
        1 << 56,
        u64::MAX,
    ];
    while slot < 64 && !b.0.is_empty() {
        let home = slot.saturating_sub(b.u8() % 8);
        let p = usize::from(b.u8() % 3);
        partitions[p] = true;
        let class: u16 = [0, 1, u16::MAX][usize::from(b.u8() % 3)];
        let (burst, sustained) = (
            DEBTS[usize::from(b.u8() % 8)],
            DEBTS[usize::from(b.u8() % 8)],
        );
        file.extend(u32::from(slot).to_le_bytes());
        file.extend(class.to_le_bytes());
        // home = lo * 64 >> 64, odd as tollgate's digests are.
        let lo = (u64::from(home) << 58) | u64::from(b.u16()) << 1 | 1;
        for x in [
            u64::from(slot),
            lo,
            0xfa4e + p as u64,
            0x0bad_0001 + 2 * p as u64,
        ] {
            file.extend(x.to_le_bytes());
        }
        file.extend(burst.to_le_bytes());
        file.extend(sustained.to_le_bytes());
        count += 1;
        slot += 1 + b.u8() % 3;
    }
    file.extend(u32::MAX.to_le_bytes());
    file.extend(count.to_le_bytes());
    let crc = crc32fast::hash(&file);
    file.extend(crc.to_le_bytes());

    let (clock, _) = Clock::mock();
    let builder = Limiter::builder(profile())
        .clock(clock)
        .key_secret(SECRET)
        .wall_clock(|| UNIX_EPOCH);
    let Ok((limiter, stats)) = builder.restore(&file[..]) else {
        // Only a debt past 2^56 ns is refused (no snapshot writes one).
        assert!(
            file.windows(8).any(|w| w == u64::MAX.to_le_bytes()),
            "a structurally valid file was refused"
        );
        return;
    };
    let mut again = Vec::new();
    limiter.snapshot(&mut again).expect("a Vec takes it");
    let tau = taus(&intervals(&again));
    let most = [0, 1].map(|b| tau.iter().map(|t| t[b]).max().unwrap_or(0));
    let mut held = std::collections::HashMap::new();
    for (r, class) in records(&again) {
        let partition: [u8; 16] = r[20..36].try_into().unwrap();
        *held.entry(partition).or_insert(0u64) += 1;
        for (bucket, at) in [(0, 36), (1, 44)] {
            let debt = u64::from_le_bytes(r[at..at + 8].try_into().unwrap());
            let limit = tau
                .get(usize::from(class))
                .map_or(most[bucket], |t| t[bucket]);
            assert!(
                debt <= limit,
                "restored owing {debt} ns, a full bucket is {limit}"
            );
        }
    }
    assert!(held.values().all(|&n| n <= 32), "{held:?} ({stats:?})");
    if partitions.iter().filter(|&&p| p).count() == 1 {
        let a = limiter.route_class("a").unwrap();
        for i in 0..8 {
            let principal = format!("fresh-{i}");
            let key = Key::authenticated("someone-else", &principal, a).unwrap();
            assert!(
                limiter.admit(&key).is_admit(),
                "a caller found no slot ({stats:?})"
            );
        }
    }
}

/// Restores `data`, if it is accepted, checks that it round-trips.
fn restore_once(data: &[u8]) {
    let (clock, _) = Clock::mock();
    let builder = Limiter::builder(profile())
        .clock(clock)
        .key_secret(SECRET)
        .wall_clock(|| UNIX_EPOCH);
    let (limiter, stats) = match builder.restore(data) {
        Ok(ok) => ok,
        Err(refused) => {
            let _ = refused.to_string();
            refused
                .start_empty()
                .expect("the builder given back builds");
            return;
        }
    };
    assert_eq!(stats.expired, 0, "no time passed");
    let mut again = Vec::new();
    let written = limiter.snapshot(&mut again).expect("a Vec takes it");
    assert_eq!(written.identities, stats.restored);
    if stats.duplicates == 0 && stats.over_share == 0 {
        // The same records (written now in the newest version: a version 1 file's classes
        // are not known), their debts in the profile's intervals (those of the snapshot just
        // written) where the file's header gave others.
        assert_eq!(
            converted(data, &intervals(&again)),
            records(&again),
            "an accepted snapshot does not round-trip"
        );
    }
}

/// The emission intervals (burst, sustained) a version 2 header gives each class; none for
/// version 1.
fn intervals(data: &[u8]) -> Vec<[u64; 2]> {
    if version(data) < 2 {
        return Vec::new();
    }
    let count = u16::from_le_bytes([data[38], data[39]]);
    let mut at = 40;
    let u64_at = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().unwrap());
    (0..count)
        .map(|_| {
            at += 1 + usize::from(data[at]);
            let t = [u64_at(at), u64_at(at + 8)];
            at += 16;
            t
        })
        .collect()
}

/// The records of `data` with each debt counted in `to` (one class's intervals each) rather
/// than in the intervals of `data`'s header: the same tokens, rounded up to a nanosecond, at
/// most 2^56 ns (the cap `Limiter::reload` documents); a record of no known class owes the most
/// any class's conversion gives, and never less than written. A version 1 file's debts stay
/// as they are (it has no intervals). Then each is clipped to a full bucket of its class (of
/// any class, for a record of none), as a restore clips.
fn converted(data: &[u8], to: &[[u64; 2]]) -> Vec<([u8; 52], u16)> {
    let from = intervals(data);
    let owed = |debt: u64, from: u64, to: u64| -> u64 {
        let n = u128::from(debt) * u128::from(to);
        n.div_ceil(u128::from(from)).min(1 << 56) as u64
    };
    let tau = taus(to);
    let mut out = records(data);
    for (r, class) in &mut out {
        for (bucket, at) in [(0, 36), (1, 44)] {
            let debt = u64::from_le_bytes(r[at..at + 8].try_into().unwrap());
            let convert = |c: usize| owed(debt, from[c][bucket], to[c][bucket]);
            let new = match usize::from(*class) {
                _ if from.is_empty() => debt,
                c if c < from.len() => convert(c),
                _ => (0..from.len()).map(convert).fold(debt, u64::max),
            };
            let most = match tau.get(usize::from(*class)) {
                Some(t) if !from.is_empty() => t[bucket],
                _ => tau.iter().map(|t| t[bucket]).max().unwrap_or(new),
            };
            r[at..at + 8].copy_from_slice(&new.min(most).to_le_bytes());
        }
    }
    out
}
