//! Quotas that survive a restart: snapshot, then a new limiter restored from it, on mock
//! clocks (the monotonic one from quanta, the wall clock given to the builder).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tollgate::quanta::{Clock, Mock};
use tollgate::snapshot::RestoreError;
use tollgate::snapshot::{RestoreStats, SnapshotError};
use tollgate::{BucketKind, Builder, Decision, Key, Limiter, Profile};

const SECRET: &[u8] = b"restart-test-secret";

/// The example profile (20 registrations a day, 100 expensive reports an hour) on a small table.
fn example(capacity: u64) -> Profile {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/profiles/example.yaml"
    ))
    .unwrap();
    let src = src.replace("capacity: 1048576", &format!("capacity: {capacity}"));
    Profile::from_yaml(&src).unwrap()
}

/// A wall clock the test sets.
#[derive(Clone)]
struct Wall(Arc<Mutex<SystemTime>>);

impl Wall {
    fn at(t: SystemTime) -> Wall {
        Wall(Arc::new(Mutex::new(t)))
    }
    fn set(&self, t: SystemTime) {
        *self.0.lock().unwrap() = t;
    }
    fn get(&self) -> SystemTime {
        *self.0.lock().unwrap()
    }
    fn builder(&self, profile: Profile, clock: Clock) -> Builder {
        let w = self.clone();
        Limiter::builder(profile)
            .clock(clock)
            .key_secret(SECRET)
            .wall_clock(move || w.get())
    }
}

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_790_000_000)
}

/// A process: a limiter on its own mock clock and the shared wall clock.
fn process(profile: Profile, wall: &Wall) -> (Limiter, Arc<Mock>) {
    let (clock, mock) = Clock::mock();
    (wall.builder(profile, clock).build().unwrap(), mock)
}

fn restart(
    bytes: &[u8],
    profile: Profile,
    wall: &Wall,
) -> Result<(Limiter, RestoreStats), RestoreError> {
    let (clock, _mock) = Clock::mock();
    wall.builder(profile, clock).restore(bytes)
}

/// Uses up alice's 20 registrations of the day (the burst of 3 refills one per 20 s), then
/// returns the refusal at that instant.
fn use_up_registrations(l: &Limiter, mock: &Mock, wall: &Wall) -> Decision {
    let reg = l.route_class("registration").unwrap();
    let alice = Key::authenticated("acme", "alice", reg).unwrap();
    for i in 0..20 {
        assert_eq!(l.admit(&alice), Decision::Admit, "registration {i}");
        mock.increment(Duration::from_secs(20));
        wall.set(wall.get() + Duration::from_secs(20));
    }
    let refused = l.admit(&alice);
    match refused {
        Decision::Throttle {
            bucket: BucketKind::Sustained,
            retry_after,
            // The 21st token of the day is 72 minutes after the first (24 h / 20).
        } => assert_eq!(retry_after, Duration::from_secs(72 * 60 - 20 * 20)),
        other => panic!("expected the day's quota to be used up, got {other:?}"),
    }
    refused
}

fn alice_registers(l: &Limiter) -> Decision {
    let reg = l.route_class("registration").unwrap();
    l.admit(&Key::authenticated("acme", "alice", reg).unwrap())
}

#[test]
fn a_used_up_daily_quota_is_still_used_up_after_a_restart() {
    let wall = Wall::at(t0());
    let (old, mock) = process(example(4096), &wall);
    let refused = use_up_registrations(&old, &mock, &wall);
    let mut snap = Vec::new();
    let written = old.snapshot(&mut snap).unwrap();
    assert_eq!(written.identities, 1);
    assert_eq!(written.bytes, snap.len() as u64);
    drop(old);

    // Ten minutes of downtime by the wall clock.
    let down = Duration::from_secs(600);
    wall.set(wall.get() + down);
    let (new, stats) = restart(&snap, example(4096), &wall).unwrap();
    assert_eq!((stats.restored, stats.elapsed), (1, down));
    assert!(!stats.wall_clock_went_back);
    let again = alice_registers(&new);
    let (
        Decision::Throttle {
            retry_after: before,
            ..
        },
        Decision::Throttle {
            retry_after,
            bucket,
        },
    ) = (refused, again)
    else {
        panic!("still refused after the restart: {again:?}");
    };
    assert_eq!(bucket, BucketKind::Sustained);
    assert_eq!(retry_after, before - down, "the wait, to the nanosecond");
    let max = new.profile().retry_after.max.get();
    assert_eq!(
        again.retry_after_secs(max),
        Some((72 * 60 - 20 * 20 - 600) as u64),
        "Retry-After in whole seconds"
    );
    // Bob, who did nothing, is as fresh as before, and alice's other classes too.
    let reg = new.route_class("registration").unwrap();
    assert_eq!(
        new.admit(&Key::authenticated("acme", "bob", reg).unwrap()),
        Decision::Admit
    );
}

#[test]
fn a_wall_clock_that_went_back_an_hour_grants_nothing() {
    let wall = Wall::at(t0());
    let (old, mock) = process(example(4096), &wall);
    use_up_registrations(&old, &mock, &wall);
    // And an hour's worth of expensive reports (100 an hour).
    let exp = old.route_class("expensive").unwrap();
    let bob = Key::authenticated("globex", "bob", exp).unwrap();
    let mut admitted = 0;
    let bob_refused = loop {
        match old.admit(&bob) {
            Decision::Admit => admitted += 1,
            refused => break refused,
        }
        mock.increment(Duration::from_millis(500));
    };
    // 100 an hour, plus what 50 s refilled.
    assert_eq!(admitted, 101);
    assert!(matches!(
        bob_refused,
        Decision::Throttle {
            bucket: BucketKind::Sustained,
            ..
        }
    ));
    let refused = alice_registers(&old);
    let mut snap = Vec::new();
    old.snapshot(&mut snap).unwrap();

    wall.set(wall.get() - Duration::from_secs(3600));
    let (new, stats) = restart(&snap, example(4096), &wall).unwrap();
    assert!(stats.wall_clock_went_back);
    assert_eq!((stats.restored, stats.elapsed), (2, Duration::ZERO));
    // Exactly the waits of the snapshot instant: as if no time had passed.
    assert_eq!(alice_registers(&new), refused);
    let exp = new.route_class("expensive").unwrap();
    assert_eq!(
        new.admit(&Key::authenticated("globex", "bob", exp).unwrap()),
        bob_refused
    );
}

#[test]
fn a_downtime_longer_than_the_debt_restores_full_buckets() {
    let wall = Wall::at(t0());
    let (old, mock) = process(example(4096), &wall);
    use_up_registrations(&old, &mock, &wall);
    let mut snap = Vec::new();
    old.snapshot(&mut snap).unwrap();
    wall.set(wall.get() + Duration::from_secs(2 * 86_400));
    let (new, stats) = restart(&snap, example(4096), &wall).unwrap();
    assert_eq!((stats.restored, stats.expired), (0, 1));
    assert_eq!(alice_registers(&new), Decision::Admit);
}

/// A snapshot of alice's used-up day, and the wall clock it was taken at.
fn used_up_snapshot() -> (Vec<u8>, Wall) {
    let wall = Wall::at(t0());
    let (old, mock) = process(example(4096), &wall);
    use_up_registrations(&old, &mock, &wall);
    // Bob too, so that the file has two records.
    let reg = old.route_class("registration").unwrap();
    assert!(old
        .admit(&Key::authenticated("globex", "bob", reg).unwrap())
        .is_admit());
    let mut snap = Vec::new();
    old.snapshot(&mut snap).unwrap();
    (snap, wall)
}

#[test]
fn corrupt_truncated_and_foreign_snapshots_are_refused() {
    let (snap, wall) = used_up_snapshot();
    let refused = |bytes: &[u8], p: Profile| {
        let e = restart(bytes, p, &wall).map(|_| ()).unwrap_err();
        assert_eq!(e.to_string(), e.cause().to_string());
        e
    };

    // Every truncation, from empty to one byte short.
    for len in 0..snap.len() {
        match refused(&snap[..len], example(4096)).cause() {
            SnapshotError::Truncated { offset } => assert_eq!(*offset, len as u64),
            other => panic!("truncated to {len}: {other}"),
        }
    }
    // A byte flipped anywhere after the magic and version: a checksum says so.
    for i in 12..snap.len() {
        let mut bad = snap.clone();
        bad[i] ^= 0x10;
        let e = refused(&bad, example(4096));
        assert!(
            matches!(
                e.cause(),
                SnapshotError::Corrupt { .. } | SnapshotError::Truncated { .. }
            ),
            "byte {i}: {e}"
        );
    }
    let mut v3 = snap.clone();
    v3[8] = 3;
    assert!(matches!(
        refused(&v3, example(4096)).cause(),
        SnapshotError::UnsupportedVersion {
            found: 3,
            supported: 2
        }
    ));
    let mut magic = snap.clone();
    magic[1] = b'X';
    assert!(matches!(
        refused(&magic, example(4096)).cause(),
        SnapshotError::NotASnapshot
    ));
    let mut trailing = snap.clone();
    trailing.push(0);
    assert!(matches!(
        refused(&trailing, example(4096)).cause(),
        SnapshotError::Malformed { .. }
    ));

    // Another table size.
    assert!(matches!(
        refused(&snap, example(8192)).cause(),
        SnapshotError::CapacityMismatch {
            snapshot: 4096,
            profile: 8192
        }
    ));
    // Another secret, and none.
    let (clock, _) = Clock::mock();
    let other = Limiter::builder(example(4096))
        .clock(clock.clone())
        .key_secret(b"another secret")
        .restore(&snap[..])
        .unwrap_err();
    assert!(matches!(other.cause(), SnapshotError::SecretMismatch));
    assert!(other.to_string().contains("another key secret"));
    let none = Limiter::builder(example(4096))
        .clock(clock)
        .restore(&snap[..])
        .unwrap_err();
    assert!(matches!(none.cause(), SnapshotError::NoSecret));
    // Route classes reordered, and one removed.
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/profiles/example.yaml"
    ))
    .unwrap()
    .replace("capacity: 1048576", "capacity: 4096");
    let swapped = src.replacen("  read:", "  readx:", 1);
    match refused(
        &snap,
        Profile::from_yaml(&swapped.replace("class: read", "class: readx")).unwrap(),
    )
    .cause()
    {
        SnapshotError::RouteClasses {
            index: 0,
            snapshot,
            profile,
        } => assert_eq!(
            (snapshot.as_str(), profile.as_deref()),
            ("read", Some("readx"))
        ),
        other => panic!("{other}"),
    }
    // Other anonymous prefixes.
    let prefixes = src.replace("ipv4_prefix: 24", "ipv4_prefix: 16");
    assert!(matches!(
        refused(&snap, Profile::from_yaml(&prefixes).unwrap()).cause(),
        SnapshotError::AnonymousPrefixes {
            snapshot: (24, 56),
            profile: (16, 56)
        }
    ));
    // New limits and a new class after the old ones are a reload, not a refusal.
    let more = src.replace("tokens: 20, per: 1d", "tokens: 30, per: 1d") + "\n# appended\n";
    let more = more.replacen(
        "  expensive:",
        "  expensive:\n    burst:     { tokens: 2,   per: 1s }\n    sustained: { tokens: 100, per: 1h }\n  bulk:",
        1,
    );
    let (l, stats) = restart(&snap, Profile::from_yaml(&more).unwrap(), &wall).unwrap();
    assert_eq!(stats.restored, 2);
    assert!(l.route_class("bulk").is_some());
}

#[test]
fn a_refused_snapshot_gives_the_builder_back_to_start_empty() {
    let (snap, wall) = used_up_snapshot();
    let mut bad = snap.clone();
    let n = bad.len();
    bad[n - 30] ^= 1;
    let (clock, _) = Clock::mock();
    let refused = wall
        .builder(example(4096), clock)
        .restore(&bad[..])
        .unwrap_err();
    assert!(matches!(
        refused.cause(),
        SnapshotError::Corrupt { part: "file", .. }
    ));
    let empty = refused.start_empty().unwrap();
    assert_eq!(alice_registers(&empty), Decision::Admit, "full buckets");
    // The file itself is only read: restoring the good bytes still works.
    assert_eq!(restart(&snap, example(4096), &wall).unwrap().1.restored, 2);
}

/// Two threads admit on their own identities (each charged by one thread only, on a frozen
/// clock, so an identity's possible states are "charged k times") while the main thread
/// snapshots. Every restored identity must show a k between what its thread had done before
/// the snapshot began and after it ended, the same k in both buckets (one CAS charges both),
/// and new identities claimed during the snapshot either absent or consistent too.
#[test]
fn a_snapshot_taken_while_two_threads_admit_is_consistent() {
    const PER_THREAD: usize = 400;
    let profile = Profile::from_yaml(
        r#"
name: consistency
identities: { capacity: 8192, tenant_share: 1.0 }
route_classes:
  c:
    burst:     { tokens: 100000, per: 100s }
    sustained: { tokens: 300000, per: 900s }
"#,
    )
    .unwrap();
    let wall = Wall::at(t0());
    let (l, _mock) = process(profile.clone(), &wall);
    let l = Arc::new(l);
    let c = l.route_class("c").unwrap();
    let counts: Arc<Vec<AtomicU64>> =
        Arc::new((0..2 * PER_THREAD).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let (l, counts, stop) = (Arc::clone(&l), Arc::clone(&counts), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut round = 0usize;
                while !stop.load(Ordering::Relaxed) && round < 2_000 {
                    for i in 0..PER_THREAD {
                        let id = t * PER_THREAD + i;
                        // Identities appear over time: later ones are claimed mid-snapshot.
                        if i > round * 4 {
                            break;
                        }
                        let name = format!("p{id}");
                        let k = Key::authenticated("tenant", &name, c).unwrap();
                        assert_eq!(l.admit(&k), Decision::Admit);
                        // Release: the count is read after the snapshot to bound the state.
                        counts[id].fetch_add(1, Ordering::Release);
                    }
                    round += 1;
                }
            })
        })
        .collect();
    let mut checked = 0;
    for _ in 0..20 {
        let before: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Acquire)).collect();
        let mut snap = Vec::new();
        l.snapshot(&mut snap).unwrap();
        let after: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Acquire)).collect();
        let (r, stats) = restart(&snap, profile.clone(), &wall).unwrap();
        assert_eq!(stats.over_share, 0);
        for id in 0..2 * PER_THREAD {
            let name = format!("p{id}");
            let rem = r.remaining(&Key::authenticated("tenant", &name, c).unwrap());
            let (kb, ks) = (100_000 - rem.burst, 300_000 - rem.sustained);
            assert_eq!(kb, ks, "p{id}: burst and sustained from one state");
            // A count is incremented after its admit, so `after` can lag one admit in flight.
            assert!(
                kb >= before[id] && kb <= after[id] + 1,
                "p{id}: restored {kb} charges, its thread had made {} to {}",
                before[id],
                after[id]
            );
            checked += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert!(checked > 0);
}

#[test]
fn a_checkpoint_replaces_its_file_atomically_while_admits_go_on() {
    let dir = std::env::temp_dir().join(format!("tollgate-checkpoint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.tgsnap");
    let wall = Wall::at(t0());
    let (l, mock) = process(example(4096), &wall);
    let l = Arc::new(l);
    let cp = l.checkpoint(&path, Duration::from_millis(5)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let admitting = {
        let (l, stop) = (Arc::clone(&l), Arc::clone(&stop));
        std::thread::spawn(move || {
            let read = l.route_class("read").unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 5_000_000 {
                let name = format!("p{}", n % 1500);
                let _ = l.admit(&Key::authenticated("acme", &name, read).unwrap());
                n += 1;
            }
        })
    };
    // Every read of the path while checkpoints replace it is one whole snapshot.
    let mut whole = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while whole < 30 && std::time::Instant::now() < deadline {
        if let Ok(bytes) = std::fs::read(&path) {
            restart(&bytes, example(4096), &wall)
                .unwrap_or_else(|e| panic!("a reader saw a torn checkpoint: {e}"));
            whole += 1;
        }
        mock.increment(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    admitting.join().unwrap();
    assert!(whole >= 30, "only {whole} checkpoints read");
    assert!(cp.status().written > 0 && cp.status().failed == 0);
    let last = cp.finish().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), last.bytes);
    // No temporary file is left behind.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "state.tgsnap")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_that_cannot_write_reports_and_keeps_going() {
    let wall = Wall::at(t0());
    let (l, _) = process(example(4096), &wall);
    let l = Arc::new(l);
    let path = std::env::temp_dir().join("tollgate-no-such-dir/sub/state.tgsnap");
    let cp = l.checkpoint(&path, Duration::from_millis(2)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while cp.status().failed < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = cp.status();
    assert!(s.failed >= 3 && s.written == 0, "{s:?}");
    assert!(matches!(s.last, Some(Err(ref e)) if e.contains("No such file")));
    assert!(cp.finish().is_err());
    assert!(l
        .checkpoint(&path, Duration::ZERO)
        .is_err_and(|e| e.kind() == std::io::ErrorKind::InvalidInput));
}

/// One class, `api`, with the burst given (a sustained bucket that never binds), on 4096 slots.
fn api(burst: &str) -> Profile {
    Profile::from_yaml(&format!(
        "name: api\nidentities: {{ capacity: 4096 }}\nroute_classes:\n  api:\n    \
         burst: {burst}\n    sustained: {{ tokens: 100000, per: 1h }}\n"
    ))
    .unwrap()
}

/// Admits `key` until refused; how many were admitted.
fn drain(l: &Limiter, key: &Key<'_>) -> u32 {
    let mut n = 0;
    while l.admit(key).is_admit() {
        n += 1;
    }
    n
}

/// A restart under other limits carries each debt in tokens, as a reload does: 100 taken
/// under 100/1s are owed under 100/10s as 100 tokens (the first in 100 ms), where carried in
/// time they would have been 1 s of a 10 s bucket (90 more at once); and 100 taken under
/// 100/10s owe 100 tokens of 10 ms under 100/1s (the first in 10 ms, not 9 s).
#[test]
fn a_restart_under_other_limits_carries_the_debt_in_tokens() {
    for (before, after, first) in [
        ("{ tokens: 100, per: 1s }", "{ tokens: 100, per: 10s }", 100),
        ("{ tokens: 100, per: 10s }", "{ tokens: 100, per: 1s }", 10),
    ] {
        let wall = Wall::at(t0());
        let (old, _mock) = process(api(before), &wall);
        let key = |l: &Limiter| {
            Key::authenticated("acme", "alice", l.route_class("api").unwrap()).unwrap()
        };
        assert_eq!(drain(&old, &key(&old)), 100);
        let mut snap = Vec::new();
        old.snapshot(&mut snap).unwrap();

        let (clock, mock) = Clock::mock();
        let (new, stats) = wall.builder(api(after), clock).restore(&snap[..]).unwrap();
        assert_eq!(stats.restored, 1);
        match new.admit(&key(&new)) {
            Decision::Throttle {
                bucket: BucketKind::Burst,
                retry_after,
            } => assert_eq!(
                retry_after,
                Duration::from_millis(first),
                "{before} to {after}"
            ),
            other => panic!("{before} to {after}: {other:?}"),
        }
        mock.increment(Duration::from_millis(first));
        assert_eq!(drain(&new, &key(&new)), 1, "{before} to {after}");
    }
}

/// A writer that reloads the limiter to another profile on its first write: the snapshot's
/// buffer (64 KiB) fills after about 1,200 records, so the records after those are read under the new
/// profile while the header already gives the old one's intervals.
struct ReloadOnFirstWrite<'a> {
    limiter: &'a Limiter,
    profile: Option<Profile>,
    out: Vec<u8>,
}

impl std::io::Write for ReloadOnFirstWrite<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Some(p) = self.profile.take() {
            self.limiter.reload(p).unwrap();
        }
        self.out.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A reload while a snapshot is written: the records read after it are counted back in the
/// header's intervals, so a restore under the old profile finds every identity as it was.
#[test]
fn a_reload_during_a_snapshot_writes_every_debt_in_the_headers_intervals() {
    let wall = Wall::at(t0());
    let (old, _mock) = process(api("{ tokens: 100, per: 1s }"), &wall);
    let class = old.route_class("api").unwrap();
    // 20 tenants of 100 principals ("7p1234": tenant "7p"), the table half full.
    let names: Vec<String> = (0..2000).map(|i| format!("{}p{i}", i % 20)).collect();
    for (i, n) in names.iter().enumerate() {
        let k = Key::authenticated(&n[..2], n, class).unwrap();
        for _ in 0..=(i % 7) {
            assert!(old.admit(&k).is_admit());
        }
    }
    let before: Vec<u64> = names
        .iter()
        .map(|n| {
            old.remaining(&Key::authenticated(&n[..2], n, class).unwrap())
                .burst
        })
        .collect();
    let mut w = ReloadOnFirstWrite {
        limiter: &old,
        profile: Some(api("{ tokens: 100, per: 10s }")),
        out: Vec::new(),
    };
    let written = old.snapshot(&mut w).unwrap();
    assert_eq!(written.identities, 2000);
    assert!(w.profile.is_none(), "the reload came during the snapshot");

    let (new, stats) = restart(&w.out, api("{ tokens: 100, per: 1s }"), &wall).unwrap();
    assert_eq!(stats.restored, 2000);
    let after: Vec<u64> = names
        .iter()
        .map(|n| {
            new.remaining(&Key::authenticated(&n[..2], n, class).unwrap())
                .burst
        })
        .collect();
    assert_eq!(before, after);
}
