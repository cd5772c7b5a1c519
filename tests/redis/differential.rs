//! Replays `fuzz/corpus/redis_differential/` through the `redis_differential` fuzz check
//! (`tollgate_testkit::fuzz::redis_differential`): the embedded limiter and the Redis backend,
//! fed the same sequences, agree on every decision at the server's instants. One server for
//! the whole corpus; each input is at most 160 steps and 40 ms of sleep. Three times: with the
//! Redis function, with tollgate's Redis module (`redis-module/`, built by the harness unless
//! `TOLLGATE_REDIS_MODULE` names it), and with both alternating on the same keys.

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
    let mut seen = Compared::default();
    tollgate_testkit::fuzz::corpus::replay("redis_differential", 1, |data| {
        let mut one = Compared::default();
        check_counted(&harness, data, &mut one);
        add(&mut seen, one);
    });
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
