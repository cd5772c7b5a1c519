//! Why a connection to the store could not be made: what [`super::RedisLimiter::connect`] and
//! [`super::FleetProfile::connect`] refuse with.

use core::fmt;
use core::time::Duration;

use crate::profile::ProfileError;

/// Why [`RedisLimiter::connect`](super::RedisLimiter::connect) failed.
#[derive(Debug)]
pub enum ConnectError {
    /// The URL could not be parsed, the server refused, or a command failed.
    Store(::redis::RedisError),
    /// The server did not answer within the connect timeout.
    Timeout(Duration),
    /// The key secret (from the builder or `TOLLGATE_KEY_SECRET`) is empty.
    EmptySecret,
    /// The profile is invalid (built or changed in Rust): the same refusal as
    /// parsing it would give.
    Profile(ProfileError),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Store(e) => write!(f, "redis: {e}"),
            ConnectError::Timeout(d) => write!(f, "redis did not answer within {d:?}"),
            ConnectError::EmptySecret => f.write_str("key secret must not be empty"),
            ConnectError::Profile(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Store(e) => Some(e),
            ConnectError::Profile(e) => Some(e),
            _ => None,
        }
    }
}

impl From<::redis::RedisError> for ConnectError {
    fn from(e: ::redis::RedisError) -> Self {
        ConnectError::Store(e)
    }
}
