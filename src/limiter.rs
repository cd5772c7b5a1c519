//! The limiter: profile, clock, key secret and table put together behind `admit`.

use core::fmt;
use core::time::Duration;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::bucket::{Limits, Rate, Tats};
use crate::decision::{Cause, Decision};
use crate::identity::{Key, KeyHasher, RouteClass};
use crate::profile::{Profile, RouteClassLimits};
use crate::table::{Apply, Table, TAT_BITS};

/// The clock stops here (34 years after the limiter was built) so that a TAT, at most one
/// period ahead of the clock, always fits in the table's 60 bits.
const MAX_NOW: u64 = (1 << TAT_BITS) - (1 << 56);

/// The admission engine. `Send + Sync`: share it by `&` or `Arc`.
///
/// ```
/// use tollgate::{Decision, Key, Limiter, Profile};
///
/// let profile = Profile::from_yaml(r#"
/// name: demo
/// identities: { capacity: 1024 }
/// route_classes:
///   write:
///     burst:     { tokens: 2,    per: 1s }
///     sustained: { tokens: 1200, per: 1h }
/// "#)?;
/// let limiter = Limiter::builder(profile).build()?;
/// let write = limiter.route_class("write").unwrap();
/// let key = Key::authenticated("acme", "alice", write)?;
/// assert_eq!(limiter.admit(&key), Decision::Admit);
/// assert_eq!(limiter.admit(&key), Decision::Admit);
/// assert!(matches!(limiter.admit(&key), Decision::Throttle { .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Limiter {
    table: Table,
    /// Indexed by `RouteClass`.
    limits: Box<[Limits]>,
    hasher: KeyHasher,
    clock: quanta::Clock,
    /// The clock's raw reading when the limiter was built: time zero of every TAT.
    epoch: u64,
    profile: RwLock<Arc<Profile>>,
}

/// One caller's tokens left, per bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remaining {
    /// Whole tokens in the burst bucket.
    pub burst: u64,
    /// Whole tokens in the sustained bucket.
    pub sustained: u64,
}

/// Builds a [`Limiter`]: `Limiter::builder(profile).clock(c).key_secret(s).build()`.
pub struct Builder {
    profile: Profile,
    clock: Option<quanta::Clock>,
    secret: Option<Vec<u8>>,
}

/// Why a limiter could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// `key_secret` was given an empty secret.
    EmptySecret,
    /// The identity table could not be allocated.
    OutOfMemory {
        /// The bytes that were asked for.
        bytes: usize,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::EmptySecret => f.write_str("key secret must not be empty"),
            BuildError::OutOfMemory { bytes } => {
                write!(f, "cannot allocate the identity table ({bytes} bytes)")
            }
        }
    }
}

impl std::error::Error for BuildError {}

impl Builder {
    /// The clock (default `quanta::Clock::new()`). Tests pass `quanta::Clock::mock()` and move
    /// time with its handle.
    pub fn clock(mut self, clock: quanta::Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The secret that keys identity digests (default: random per limiter). Processes that must
    /// agree on digests, such as workers sharing Redis, set the same secret.
    pub fn key_secret(mut self, secret: &[u8]) -> Self {
        self.secret = Some(secret.to_vec());
        self
    }

    /// Allocates the table and starts the clock.
    pub fn build(self) -> Result<Limiter, BuildError> {
        let secret = match self.secret {
            Some(s) if s.is_empty() => return Err(BuildError::EmptySecret),
            Some(s) => s,
            None => random_secret(),
        };
        let capacity = self.profile.identities.capacity.0 as usize;
        let bytes = capacity.saturating_mul(64);
        // Ask first, so that a capacity the machine cannot hold is an error, not an abort.
        let mut probe: Vec<u8> = Vec::new();
        probe
            .try_reserve_exact(bytes)
            .map_err(|_| BuildError::OutOfMemory { bytes })?;
        drop(probe);
        let clock = self.clock.unwrap_or_default();
        let anon = self.profile.anonymous;
        Ok(Limiter {
            table: Table::new(capacity),
            limits: self
                .profile
                .route_classes
                .iter()
                .map(|(_, l)| limits(l))
                .collect(),
            hasher: KeyHasher::new(&secret, anon.ipv4_prefix.0, anon.ipv6_prefix.0),
            epoch: clock.raw(),
            clock,
            profile: RwLock::new(Arc::new(self.profile)),
        })
    }
}

fn limits(l: &RouteClassLimits) -> Limits {
    Limits {
        burst: Rate::new(l.burst.tokens.0, l.burst.per.as_nanos()),
        sustained: Rate::new(l.sustained.tokens.0, l.sustained.per.as_nanos()),
    }
}

/// 32 bytes from the OS-seeded hasher of the standard library.
fn random_secret() -> Vec<u8> {
    let s = RandomState::new();
    (0..4u64)
        .flat_map(|i| s.hash_one(i).to_le_bytes())
        .collect()
}

impl Limiter {
    /// Starts building a limiter for `profile`.
    pub fn builder(profile: Profile) -> Builder {
        Builder {
            profile,
            clock: None,
            secret: None,
        }
    }

    /// The handle of a route class of the profile, or `None` if it has no such class.
    pub fn route_class(&self, name: &str) -> Option<RouteClass> {
        self.profile
            .read()
            .route_classes
            .position(name)
            .map(|i| RouteClass(i as u32))
    }

    /// Decides one request, and charges it if admitted: both of the caller's buckets lose a
    /// token in one atomic step, or neither does.
    ///
    /// # Panics
    /// If `key`'s route class came from another limiter with more classes.
    #[inline]
    pub fn admit(&self, key: &Key<'_>) -> Decision {
        // The clock first: reading the TSC takes longer than hashing, and neither needs the other.
        let raw = self.clock.raw();
        let limits = self.limits(key.class);
        let digest = self.hasher.digest(key);
        let now = self.nanos_since_epoch(raw);
        let answer = self
            .table
            .update(digest, now, |tats| match limits.charge(tats, now) {
                Ok(next) => Apply::Write(next, Decision::Admit),
                Err(short) => Apply::Keep(Decision::Throttle {
                    retry_after: Duration::from_nanos(short.wait),
                    bucket: short.bucket,
                }),
            });
        // No slot: fail closed. No wait is given, since when a slot frees depends on other
        // callers' buckets.
        answer.unwrap_or(Decision::Unavailable {
            retry_after: None,
            cause: Cause::TableFull,
        })
    }

    /// What [`Limiter::admit`] would answer now, charging nothing.
    pub fn peek(&self, key: &Key<'_>) -> Decision {
        let limits = self.limits(key.class);
        let now = self.now();
        let tats = self
            .table
            .peek(self.hasher.digest(key), now)
            .unwrap_or(Tats::full(now));
        match limits.charge(tats, now) {
            Ok(_) => Decision::Admit,
            Err(short) => Decision::Throttle {
                retry_after: Duration::from_nanos(short.wait),
                bucket: short.bucket,
            },
        }
    }

    /// Bytes held by the limiter: the table (64 bytes a slot) and its bookkeeping.
    pub fn memory_bytes(&self) -> usize {
        core::mem::size_of::<Self>() + self.table.memory_bytes() - core::mem::size_of::<Table>()
            + core::mem::size_of_val(&*self.limits)
    }

    /// Identity slots in the table.
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// The profile in force (a snapshot: a reload does not change what it points to).
    pub fn profile(&self) -> Arc<Profile> {
        self.profile.read().clone()
    }

    /// The caller's own tokens left in each bucket, charging nothing (for the `RateLimit`
    /// header, when the profile opts in to exposing it).
    pub fn remaining(&self, key: &Key<'_>) -> Remaining {
        let limits = self.limits(key.class);
        let now = self.now();
        let tats = self
            .table
            .peek(self.hasher.digest(key), now)
            .unwrap_or(Tats::full(now));
        Remaining {
            burst: limits.burst.remaining(tats.burst, now),
            sustained: limits.sustained.remaining(tats.sustained, now),
        }
    }

    #[inline]
    fn limits(&self, class: RouteClass) -> Limits {
        match self.limits.get(class.0 as usize) {
            Some(l) => *l,
            None => panic!("route class {} does not belong to this limiter", class.0),
        }
    }

    /// Nanoseconds since the limiter was built, on its own monotonic clock.
    #[inline]
    fn now(&self) -> u64 {
        self.nanos_since_epoch(self.clock.raw())
    }

    #[inline]
    fn nanos_since_epoch(&self, raw: u64) -> u64 {
        self.clock.delta_as_nanos(self.epoch, raw).min(MAX_NOW)
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("profile", &self.profile.read().name)
            .field("capacity", &self.table.capacity())
            .finish_non_exhaustive()
    }
}
