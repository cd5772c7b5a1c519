//! Building a [`Limiter`]: the options (clock, key secret, wall clock, metrics), and the one
//! place that validates the profile and allocates the table, so that a limiter that exists is
//! always a usable one.

use core::fmt;
use core::time::Duration;

use super::coarse_clock::{CoarseClock, MAX_INTERVAL, MIN_INTERVAL};
use super::{nanos_since, Limiter};
use crate::capacity::Tenants;
use crate::engine::{random_secret, Engine, ObserveOptions};
use crate::profile::{Profile, ProfileError};
use crate::table::Table;
use crate::wall_clock::WallClock;

/// The environment variable a service reads its key secret from
/// ([`Builder::key_secret_from_env`]; the Redis backend's builder reads it by default).
pub const KEY_SECRET_ENV: &str = "TOLLGATE_KEY_SECRET";

impl Limiter {
    /// Starts building a limiter for `profile`.
    pub fn builder(profile: Profile) -> Builder {
        Builder {
            profile,
            clock: None,
            secret: None,
            observe: Default::default(),
            wall: WallClock::default(),
            coarse: None,
        }
    }
}

/// Builds a [`Limiter`]: `Limiter::builder(profile).clock(c).key_secret(s).build()`, or
/// `.restore(reader)` to start from a snapshot (`crate::snapshot`).
#[derive(Clone)]
pub struct Builder {
    pub(crate) profile: Profile,
    clock: Option<quanta::Clock>,
    pub(crate) secret: Option<Vec<u8>>,
    observe: ObserveOptions,
    pub(crate) wall: WallClock,
    coarse: Option<Duration>,
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
    /// The profile is invalid (built or changed in Rust): the same refusal as
    /// parsing it would give, kind [`Invalid`](crate::profile::ProfileErrorKind::Invalid).
    Profile(ProfileError),
    /// [`Builder::coarse_clock`]'s interval is outside 100 µs ..= 100 ms.
    CoarseClockInterval(Duration),
    /// The coarse clock's thread could not be started (the OS's reason).
    CoarseClockThread(String),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::EmptySecret => f.write_str("key secret must not be empty"),
            BuildError::OutOfMemory { bytes } => {
                write!(f, "cannot allocate the identity table ({bytes} bytes)")
            }
            BuildError::Profile(e) => fmt::Display::fmt(e, f),
            BuildError::CoarseClockInterval(d) => write!(
                f,
                "coarse clock interval {d:?} is outside {MIN_INTERVAL:?} ..= {MAX_INTERVAL:?}"
            ),
            BuildError::CoarseClockThread(e) => {
                write!(f, "cannot start the coarse clock's thread: {e}")
            }
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Profile(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ProfileError> for BuildError {
    fn from(e: ProfileError) -> Self {
        BuildError::Profile(e)
    }
}

impl Builder {
    /// The clock (default `quanta::Clock::new()`). Tests pass `quanta::Clock::mock()` and move
    /// time with its handle.
    pub fn clock(mut self, clock: quanta::Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Opt-in: decisions read a time stored every `interval` (100 µs ..= 100 ms) by a thread
    /// of the limiter's own, instead of reading the clock (the TSC read is the largest single
    /// part of a hot admit: `benches/README.md`); the thread stops when the limiter is dropped. Works
    /// with any clock, the mock one included (the thread reads it).
    ///
    /// What it costs, all bounded by the interval (plus any delay in scheduling the thread):
    /// decisions see a time up to one interval old, so a refusal's `Retry-After` may be up to
    /// one interval longer than needed, and a caller who waits exactly that long may be refused
    /// once more, for up to one interval; over any span a bucket may admit up to one
    /// interval's worth of its rate beyond its limit (the clock catching up its lag); shared
    /// capacity windows turn over up to one interval late. The default is the exact clock.
    pub fn coarse_clock(mut self, interval: Duration) -> Self {
        self.coarse = Some(interval);
        self
    }

    /// The secret that keys identity digests (default: random per limiter). Processes that must
    /// agree on digests, such as workers sharing Redis, set the same secret.
    pub fn key_secret(mut self, secret: &[u8]) -> Self {
        self.secret = Some(secret.to_vec());
        self
    }

    /// The key secret from the environment's [`KEY_SECRET_ENV`] when it is set and not empty
    /// (otherwise the builder keeps what it had): how a service run from the command line gets
    /// a stable secret, as `RedisBuilder` does by default.
    pub fn key_secret_from_env(self) -> Self {
        match std::env::var(KEY_SECRET_ENV) {
            Ok(s) if !s.is_empty() => self.key_secret(s.as_bytes()),
            _ => self,
        }
    }

    /// The wall clock that snapshots are dated by and restores measure the downtime with
    /// (default `SystemTime::now`). Tests pass their own to move it, backwards too.
    pub fn wall_clock(
        mut self,
        now: impl Fn() -> std::time::SystemTime + Send + Sync + 'static,
    ) -> Self {
        self.wall = WallClock::new(now);
        self
    }

    /// Counts decisions per listed tenant too (`tollgate_tenant_decisions_total{tenant}`; the
    /// profile's `shared_capacity.tenants`, every other tenant as `other`). Off by default:
    /// operators opt in to tell one tenant's retry storm from real growth.
    #[cfg(feature = "metrics")]
    pub fn per_tenant_metrics(mut self, on: bool) -> Self {
        self.observe.per_tenant = on;
        self
    }

    /// Called when the share of capacity refusals crosses `error_budget.capacity_rejections`
    /// (and again when it falls back), besides the gauge and the `tracing` warning.
    #[cfg(feature = "metrics")]
    pub fn on_error_budget(
        mut self,
        callback: impl Fn(&crate::observe::BudgetAlert) + Send + Sync + 'static,
    ) -> Self {
        self.observe.callback = Some(std::sync::Arc::new(callback));
        self
    }

    /// Validates the profile, allocates the table and starts the clock.
    pub fn build(self) -> Result<Limiter, BuildError> {
        self.profile.validate()?;
        if let Some(interval) = self.coarse {
            if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&interval) {
                return Err(BuildError::CoarseClockInterval(interval));
            }
        }
        let secret = match self.secret {
            Some(s) if s.is_empty() => return Err(BuildError::EmptySecret),
            Some(s) => s,
            None => random_secret(),
        };
        let engine = Engine::new(self.profile, &secret, self.observe);
        let (capacity, listed) = {
            let cfg = engine.config.load();
            let listed = cfg
                .profile
                .shared_capacity
                .as_ref()
                .map_or(0, |s| s.tenants.len());
            (cfg.identities, listed)
        };
        let entries = Tenants::entries_for(capacity, listed);
        let bytes = capacity
            .saturating_mul(64)
            .saturating_add(Tenants::bytes_for(capacity, entries));
        // Ask first, so that a capacity the machine cannot hold is an error, not an abort.
        let mut probe: Vec<u8> = Vec::new();
        probe
            .try_reserve_exact(bytes)
            .map_err(|_| BuildError::OutOfMemory { bytes })?;
        drop(probe);
        let clock = self.clock.unwrap_or_default();
        let epoch = clock.raw();
        let coarse = match self.coarse {
            None => None,
            Some(interval) => {
                let exact = clock.clone();
                let coarse = CoarseClock::start(interval, move || nanos_since(&exact, epoch))
                    .map_err(|e| BuildError::CoarseClockThread(e.to_string()))?;
                Some(coarse)
            }
        };
        Ok(Limiter {
            engine,
            table: Table::new(capacity),
            tenants: Tenants::new(capacity, entries),
            epoch,
            clock,
            wall: self.wall,
            coarse,
        })
    }
}
