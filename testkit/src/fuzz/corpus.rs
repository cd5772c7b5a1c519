//! The checked-in corpora (`fuzz/corpus/<target>/`: seeds and regression inputs), read and
//! replayed through a target's check on stable, as ordinary tests: one way for every target.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::PathBuf;

/// The corpus directory of `target`.
pub fn dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

/// Every input of `target`'s corpus, by file name, in name order. Panics if there are fewer
/// than `at_least` (a corpus that went missing must not pass as empty).
pub fn inputs(target: &str, at_least: usize) -> Vec<(String, Vec<u8>)> {
    let dir = dir(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= at_least,
        "{} inputs in {}, at least {at_least} expected",
        files.len(),
        dir.display()
    );
    files
        .into_iter()
        .map(|f| {
            let data = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            (f.display().to_string(), data)
        })
        .collect()
}

/// Runs `check` on every input of `target`'s corpus (at least `at_least`); a failure names
/// the input it failed on.
pub fn replay(target: &str, at_least: usize, mut check: impl FnMut(&[u8])) {
    for (name, data) in inputs(target, at_least) {
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| check(&data))) {
            eprintln!("corpus input failed: {name}");
            resume_unwind(e);
        }
    }
}
