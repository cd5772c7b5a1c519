//! Replays every checked-in fuzz seed and regression input (`fuzz/corpus/<target>/`) through
//! the very function its fuzz target runs (`tollgate_testkit::fuzz::<target>::check`), on stable,
//! as an ordinary test.

use std::path::Path;

use tollgate_testkit::fuzz;

/// Runs `check` on every file of `fuzz/corpus/<target>/`; the corpus must not be empty.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus in {}", dir.display());
    for f in files {
        let data = std::fs::read(&f).unwrap();
        let name = f.display().to_string();
        if let Err(e) = std::panic::catch_unwind(|| check(&data)) {
            eprintln!("corpus file failed: {name}");
            std::panic::resume_unwind(e);
        }
    }
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
