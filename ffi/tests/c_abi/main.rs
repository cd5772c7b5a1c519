//! The C ABI from outside Rust: the checked-in header is cbindgen's output, a C program links
//! `libtollgate.so` and `libtollgate.a`, the header compiles as C++, and Python calls the library
//! through ctypes.

mod c;
mod header;
mod python;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `libtollgate.so`'s file name on this platform.
fn cdylib_name() -> &'static str {
    if cfg!(target_os = "macos") {
        "libtollgate.dylib"
    } else {
        "libtollgate.so"
    }
}

/// The directory holding `libtollgate.so` and `libtollgate.a`, built once per test run by
/// `cargo build -p tollgate-ffi-lib` into this build's own target directory and profile (the
/// libraries are another package's: `cargo test` does not build them for this one).
fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // The test binary is `<target>/<profile dir>/deps/<name>`.
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("<target>/<profile>");
        let target = profile_dir.parent().expect("<target>");
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev",
            Some(other) => other,
            None => panic!("no profile directory above {}", exe.display()),
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "-p",
                "tollgate-ffi-lib",
                "--profile",
                profile,
                "--target-dir",
            ])
            .arg(target)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build -p tollgate-ffi-lib");
        assert!(
            status.success(),
            "cargo build -p tollgate-ffi-lib failed: {status}"
        );
        let lib = profile_dir.join(cdylib_name());
        assert!(lib.exists(), "cargo built no {}", lib.display());
        profile_dir.to_path_buf()
    })
}

/// The ffi crate's directory: `include/`, `tests/c/` and `examples/python/` are under it.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}
