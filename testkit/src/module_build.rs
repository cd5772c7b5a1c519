//! Where tollgate's Redis module (`redis-module/`, its own workspace) is for the tests: built
//! on first use unless the environment names it, and whether every test server loads it.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The environment variable naming an already-built module (skips the build).
pub const MODULE_ENV: &str = "TOLLGATE_REDIS_MODULE";

/// The environment variable that makes [`RedisServer::start`](crate::redis_server::RedisServer::start) load the module in every test
/// server, so the whole Redis suite runs on the module's commands (`.ci/run` sets it once).
pub const ALL_ENV: &str = "TOLLGATE_TEST_REDIS_MODULE";

/// The module's `.so`: `$TOLLGATE_REDIS_MODULE`, else built once per process with
/// `cargo build --release --manifest-path redis-module/Cargo.toml`. Panics, saying how to build
/// it, if it can be neither found nor built: a module test never passes without the module.
pub fn path() -> String {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Ok(p) = std::env::var(MODULE_ENV) {
            assert!(
                std::path::Path::new(&p).is_file(),
                "{MODULE_ENV}={p} is not a file: build the module with `cargo build --release \
                 --manifest-path redis-module/Cargo.toml` and point {MODULE_ENV} at \
                 redis-module/target/release/libtollgate_redis.so (or unset it to build here)"
            );
            return p;
        }
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let manifest = root.join("redis-module/Cargo.toml");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let status = Command::new(&cargo)
            .args(["build", "--quiet", "--release", "--manifest-path"])
            .arg(&manifest)
            .status();
        let built = root.join("redis-module/target/release/libtollgate_redis.so");
        match status {
            Ok(s) if s.success() && built.is_file() => built.display().to_string(),
            other => panic!(
                "could not build tollgate's Redis module ({other:?}): run `cargo build --release \
                 --manifest-path redis-module/Cargo.toml`, or set {MODULE_ENV} to a built \
                 libtollgate_redis.so"
            ),
        }
    })
    .clone()
}

/// Whether [`ALL_ENV`] asks for the module in every test server.
pub fn everywhere() -> bool {
    std::env::var_os(ALL_ENV).is_some_and(|v| v == "1")
}
