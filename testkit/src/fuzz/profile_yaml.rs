//! The `profile_yaml` check: what `fuzz/fuzz_targets/profile_yaml.rs` runs on every input, and what
//! `tests/engine/fuzz_corpus.rs` replays on stable over `fuzz/corpus/profile_yaml/`.
//!
//! Profile parsing never panics, whatever the bytes; a refusal is a syntax error or an invalid
//! value; a profile it accepts passes `validate` (what `build` and `reload` check) and prints
//! (serde_yaml_ng) to YAML that parses back to an equal profile.

/// Runs one input; panics on a failed check.
pub fn check(data: &[u8]) {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let p = match tollgate::Profile::from_yaml(src) {
        Ok(p) => p,
        Err(e) => {
            use tollgate::profile::ProfileErrorKind::{Invalid, Syntax};
            assert!(matches!(e.kind(), Syntax | Invalid), "{:?}: {e}", e.kind());
            return;
        }
    };
    p.validate()
        .unwrap_or_else(|e| panic!("an accepted profile fails validate: {e}"));
    let printed = serde_yaml_ng::to_string(&p).expect("an accepted profile prints");
    let back = tollgate::Profile::from_yaml(&printed)
        .unwrap_or_else(|e| panic!("printed profile does not parse: {e}\n{printed}"));
    assert_eq!(back, p, "round trip changed the profile:\n{printed}");
}
