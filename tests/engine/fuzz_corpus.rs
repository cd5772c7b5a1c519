//! Replays every checked-in fuzz seed and regression input (`fuzz/corpus/<target>/`) through
//! the very function its fuzz target runs (`tollgate_testkit::fuzz::<target>::check`), on stable,
//! as an ordinary test.

use tollgate_testkit::fuzz;

/// Runs `check` on every input of `fuzz/corpus/<target>/`; the corpus must not be empty.
fn replay(target: &str, check: fn(&[u8])) {
    fuzz::corpus::replay(target, 1, check);
}

#[test]
fn profile_yaml_corpus() {
    replay("profile_yaml", fuzz::profile_yaml::check);
}

#[test]
fn admit_sequence_corpus() {
    replay("admit_sequence", fuzz::admit_sequence::check);
}

#[test]
fn retry_after_corpus() {
    replay("retry_after", fuzz::retry_after::check);
}

#[test]
fn ffi_calls_corpus() {
    replay("ffi_calls", fuzz::ffi_calls::check);
}

#[test]
fn snapshot_reader_corpus() {
    replay("snapshot_reader", fuzz::snapshot_reader::check);
}

/// The checked-in valid seed is what this build writes: version 2 of the format has not
/// drifted (a deliberate change bumps the version and regenerates the seed).
#[test]
fn snapshot_format_is_stable() {
    let seed = corpus("snapshot_reader/seed-valid");
    let checked_in = std::fs::read(&seed).unwrap();
    assert_eq!(
        checked_in,
        fuzz::snapshot_reader::sample(),
        "{} differs from what this build writes",
        seed.display()
    );
    // Header 88 bytes (two one-letter classes and their intervals), 54 a record, 16 the end.
    let restored = restored(&checked_in);
    assert_eq!(restored, (checked_in.len() as u64 - 88 - 16) / 54);
    assert!(
        restored > 20,
        "the seed has the identities it was made with"
    );
}

/// A version 1 snapshot (the seed the previous format wrote) is still read, every identity.
#[test]
fn snapshot_format_version_1_is_still_read() {
    let v1 = std::fs::read(corpus("snapshot_reader/seed-valid-v1")).unwrap();
    assert_eq!(u32::from_le_bytes(v1[8..12].try_into().unwrap()), 1);
    // Header 56 bytes (two one-letter classes), 52 a record, 16 the end.
    let restored = restored(&v1);
    assert_eq!(restored, (v1.len() as u64 - 56 - 16) / 52);
    assert!(restored > 20);
}

fn corpus(name: &str) -> std::path::PathBuf {
    let (target, file) = name.split_once('/').expect("target/file");
    fuzz::corpus::dir(target).join(file)
}

/// Identities a restore of `snapshot` under the fuzz profile puts back.
fn restored(snapshot: &[u8]) -> u64 {
    let (clock, _) = tollgate::quanta::Clock::mock();
    let (_, stats) = tollgate::Limiter::builder(fuzz::snapshot_reader::profile())
        .clock(clock)
        .key_secret(fuzz::snapshot_reader::SECRET)
        .wall_clock(|| std::time::UNIX_EPOCH)
        .restore(snapshot)
        .unwrap();
    stats.restored
}
