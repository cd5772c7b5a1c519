//! Replays every checked-in fuzz seed and regression input (`fuzz/corpus/<target>/`) through
//! the very function its fuzz target runs (`fuzz/checks/<target>.rs`, `include!`d both here and
//! by `fuzz/fuzz_targets/<target>.rs`), on stable, as an ordinary test.
//!
//! `retry_after` needs the `client` feature and `ffi_calls` the `ffi` feature (the README's test
//! command enables both).

use std::path::Path;

mod profile_yaml {
    include!("../fuzz/checks/profile_yaml.rs");
}
mod admit_sequence {
    include!("../fuzz/checks/admit_sequence.rs");
}
#[cfg(feature = "client")]
mod retry_after {
    include!("../fuzz/checks/retry_after.rs");
}
#[cfg(feature = "ffi")]
mod ffi_calls {
    include!("../fuzz/checks/ffi_calls.rs");
}

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
    replay("profile_yaml", profile_yaml::check);
}

#[test]
fn admit_sequence_corpus() {
    replay("admit_sequence", admit_sequence::check);
}

#[cfg(feature = "client")]
#[test]
fn retry_after_corpus() {
    replay("retry_after", retry_after::check);
}

#[cfg(feature = "ffi")]
#[test]
fn ffi_calls_corpus() {
    replay("ffi_calls", ffi_calls::check);
}
