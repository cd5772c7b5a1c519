//! Where state lives: the embedded [`Limiter`] (one process) or, with the `redis` feature,
//! [`RedisLimiter`](tollgate::redis::RedisLimiter) (several servers sharing limits). The
//! service sees only [`Backend`]: the engine's [`Admission`] plus what a server does besides
//! deciding (reload, the discovery document).

use tollgate::{Admission, Limiter, Profile, ProfileError, PublishedLimits};

/// A limiter the server can run on: decide, reload, publish.
pub trait Backend: Admission {
    /// Swaps in a new profile, keeping bucket state; a refused profile leaves the old in force.
    fn reload(&self, profile: Profile) -> Result<(), ProfileError>;
    /// The discovery document of the profile in force.
    fn published_limits(&self) -> PublishedLimits;
    /// A word for logs: `embedded` or `redis`.
    fn kind(&self) -> &'static str;
}

impl Backend for Limiter {
    fn reload(&self, profile: Profile) -> Result<(), ProfileError> {
        Limiter::reload(self, profile)
    }
    fn published_limits(&self) -> PublishedLimits {
        Limiter::published_limits(self)
    }
    fn kind(&self) -> &'static str {
        "embedded"
    }
}

#[cfg(feature = "redis")]
impl Backend for tollgate::redis::RedisLimiter {
    fn reload(&self, profile: Profile) -> Result<(), ProfileError> {
        tollgate::redis::RedisLimiter::reload(self, profile)
    }
    fn published_limits(&self) -> PublishedLimits {
        tollgate::redis::RedisLimiter::published_limits(self)
    }
    fn kind(&self) -> &'static str {
        "redis"
    }
}
