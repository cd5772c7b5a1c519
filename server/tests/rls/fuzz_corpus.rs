//! Replays the checked-in seeds and regression inputs of the `rls_request` fuzz target
//! (`fuzz/corpus/rls_request/`) through the very function the target runs
//! (`tollgate_testkit::fuzz::rls_request::check`), on stable, as `tests/engine/fuzz_corpus.rs`
//! does for the engine's targets.

#[test]
fn rls_request_corpus() {
    let corpus = tollgate_testkit::fuzz::corpus::replay;
    corpus(
        "rls_request",
        10,
        tollgate_testkit::fuzz::rls_request::check,
    );
}
