//! Replays the checked-in seeds and regression inputs of the `rls_request` fuzz target
//! (`fuzz/corpus/rls_request/`) through the very function the target runs
//! (`tollgate_testkit::fuzz::rls_request::check`), on stable, as `tests/engine/fuzz_corpus.rs`
//! does for the engine's targets.

use std::path::Path;

#[test]
fn rls_request_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/rls_request");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "the seeds are missing from {}",
        dir.display()
    );
    for f in files {
        let data = std::fs::read(&f).unwrap();
        let name = f.display().to_string();
        if let Err(e) =
            std::panic::catch_unwind(|| tollgate_testkit::fuzz::rls_request::check(&data))
        {
            eprintln!("corpus file failed: {name}");
            std::panic::resume_unwind(e);
        }
    }
}
