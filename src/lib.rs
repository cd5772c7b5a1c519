//! tollgate: an embedded admission engine for HTTP APIs.
//!
//! A service asks, for every request, [`Limiter::admit`]`(&key) -> `[`Decision`]. The answer
//! comes from a fixed-size, lock-free table of per-caller token buckets (a burst and a sustained
//! bucket per identity and route class, changed together in one compare-and-swap), says exactly
//! when to come back, and never tells one tenant anything about another.
//!
//! ```
//! use tollgate::{Decision, Key, Limiter, Profile};
//!
//! let profile = Profile::from_path("examples/profiles/example.yaml")?;
//! let limiter = Limiter::builder(profile).build()?;
//! let write = limiter.route_class("write").expect("the profile has a write class");
//!
//! let key = Key::authenticated("acme", "alice", write)?;
//! match limiter.admit(&key) {
//!     Decision::Admit => { /* serve the request */ }
//!     Decision::Throttle { retry_after, .. } => { /* 429, Retry-After: retry_after */ }
//!     Decision::Unavailable { .. } => { /* 503 */ }
//!     Decision::Exceeds { .. } => { /* 429: a weighted cost (admit_n) larger than a bucket */ }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs, unsafe_op_in_unsafe_fn)]
// On docs.rs, every item that needs a feature says which.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod admission;
mod bucket;
mod capacity;
mod config;
mod decision;
mod engine;
pub mod guide;
mod identity;
mod limiter;
#[cfg(feature = "metrics")]
pub mod observe;
pub mod profile;
pub mod published;
pub mod snapshot;
mod sync;
mod table;
mod wall_clock;

#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "tower")]
pub mod tower;

/// Internals that the loom models in `loom-tests/` drive directly. Not part of the API.
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub mod __loom {
    pub use crate::capacity::ShardCounter;
}

/// The clock crate tollgate uses, re-exported so that `Builder::clock` needs no version match.
pub use quanta;

pub use admission::Admission;
pub use decision::{BucketKind, Cause, Decision, Outcome, Remaining};
pub use engine::Verdict;
pub use identity::{Key, KeyError, RouteClass, MAX_ID_LEN};
pub use limiter::{BuildError, Builder, Limiter, Pinned, Refused, KEY_SECRET_ENV};
pub use profile::error::ProfileError;
pub use profile::schema::CatalogEntry;
pub use profile::schema::Profile;
pub use published::PublishedLimits;
