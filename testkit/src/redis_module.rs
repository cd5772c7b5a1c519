//! tollgate's Redis module (`redis-module/`, its own workspace) for the tests that run against
//! it: the path of its `.so`, built on first use, and a `redis-server` that loads it.

use crate::redis_server::RedisServer;

pub use crate::module_build::{everywhere, path, ALL_ENV, MODULE_ENV};

/// A `redis-server` with the module loaded (and `MODULE`, `DEBUG` allowed from loopback, for
/// tests that unload it or compare digests).
pub fn server() -> RedisServer {
    RedisServer::start_with(&[
        "--loadmodule",
        &path(),
        "--enable-module-command",
        "local",
        "--enable-debug-command",
        "local",
    ])
}
