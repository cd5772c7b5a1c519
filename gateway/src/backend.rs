//! What the gateway decides with: the embedded [`Limiter`], or (feature `redis`) a
//! [`RedisLimiter`](tollgate::redis::RedisLimiter) whose buckets every gateway on the same Redis
//! shares. The routers are written once over this trait.

use tollgate::http::admin::ProfileTarget;
use tollgate::{Admission, Limiter, PublishedLimits};

/// A limiter the gateway can serve: decisions (through the tower layer), the profile in force
/// and its reload (the watcher, the admin routes), and the discovery document.
pub trait Backend: Admission + ProfileTarget {
    /// The document served at `GET /.well-known/rate-limits`.
    fn published_limits(&self) -> PublishedLimits;
}

impl Backend for Limiter {
    fn published_limits(&self) -> PublishedLimits {
        Limiter::published_limits(self)
    }
}

#[cfg(feature = "redis")]
impl Backend for tollgate::redis::RedisLimiter {
    fn published_limits(&self) -> PublishedLimits {
        tollgate::redis::RedisLimiter::published_limits(self)
    }
}
