//! Replays `fuzz/corpus/redis_differential/` through the `redis_differential` fuzz check
//! (`tollgate_testkit::fuzz::redis_differential`): the embedded limiter and the Redis backend,
//! fed the same sequences, agree on every decision at the server's instants. One server for
//! the whole corpus; each input is at most 160 steps and 40 ms of sleep. Three times: with the
//! Redis function, with tollgate's Redis module (`redis-module/`, built by the harness unless
//! `TOLLGATE_REDIS_MODULE` names it), and with both alternating on the same keys.

use std::panic::AssertUnwindSafe;
use std::path::Path;

use tollgate::Outcome;
use tollgate_testkit::fuzz::redis_differential::{check_counted, Compared, Harness};

#[test]
fn redis_differential_corpus() {
    replay(Harness::start());
}

#[test]
fn redis_differential_corpus_module() {
    replay(Harness::start_module());
}

#[test]
fn redis_differential_corpus_module_and_function_mixed() {
    replay(Harness::start_mixed());
}

fn replay(harness: Harness) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/redis_differential");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus in {}", dir.display());
    let mut seen = Compared::default();
    for f in files {
        let data = std::fs::read(&f).unwrap();
        let harness = AssertUnwindSafe(&harness);
        if let Err(e) = std::panic::catch_unwind(move || {
            let mut one = Compared::default();
            check_counted(&harness, &data, &mut one);
            one
        })
        .map(|one| add(&mut seen, one))
        {
            eprintln!("corpus file failed: {}", f.display());
            std::panic::resume_unwind(e);
        }
    }
    eprintln!("{seen:?}");
    // The seeds reach every kind of answer and every kind of step, whatever the machine's speed.
    for o in [
        Outcome::Admitted,
        Outcome::ThrottledBurst,
        Outcome::ThrottledSustained,
        Outcome::ExceedsBurst,
        Outcome::ExceedsSustained,
        Outcome::TenantShare,
    ] {
        assert!(seen.decisions[o.index()] > 0, "no {o:?} compared: {seen:?}");
    }
    // Reloads that change a class's emission intervals are compared across (debt in tokens).
    assert!(
        seen.peeks > 0 && seen.admit_all_checked > 0 && seen.reloads > 0 && seen.converted > 0,
        "{seen:?}"
    );
}

fn add(to: &mut Compared, one: Compared) {
    for (t, o) in to.decisions.iter_mut().zip(one.decisions) {
        *t += o;
    }
    to.peeks += one.peeks;
    to.admit_all_checked += one.admit_all_checked;
    to.admit_all_open += one.admit_all_open;
    to.reloads += one.reloads;
    to.converted += one.converted;
    to.renamed += one.renamed;
    to.stopped += one.stopped;
}
