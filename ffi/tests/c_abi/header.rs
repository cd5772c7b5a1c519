//! The checked-in `include/tollgate.h` is what cbindgen makes from `src/lib.rs` now (and from the
//! modules it declares, which cbindgen follows: `result.rs`, `decision.rs`, ...).
//!
//! Regenerate it with `TOLLGATE_BLESS_HEADER=1 cargo test -p tollgate-ffi --test c_abi header`.

use std::path::Path;

const REGENERATE: &str = "TOLLGATE_BLESS_HEADER=1 cargo test -p tollgate-ffi --test c_abi header";

#[test]
fn header_is_up_to_date() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        // The crate root: cbindgen follows its `mod` declarations into every file of `src/`.
        .with_src(root.join("src/lib.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let path = root.join("include/tollgate.h");
    if std::env::var_os("TOLLGATE_BLESS_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write include/tollgate.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let first = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| checked_in.lines().count().min(generated.lines().count()));
        panic!(
            "include/tollgate.h differs from what cbindgen generates from src/lib.rs \
             (first difference at line {}).\nRegenerate it with:\n    {REGENERATE}\n\
             and commit the result.",
            first + 1
        );
    }
}
