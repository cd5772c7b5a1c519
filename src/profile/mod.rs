//! The profile: route classes and their buckets, identity table size, shared capacity,
//! catalog codes. It depends on nothing of the engine; the engine reads it.
//!
//! A [`Profile`] is valid by construction: every scalar in it ([`Tokens`], [`Period`], ...)
//! has a private field and a fallible `new`, and deserializes through it; what spans fields
//! is checked by [`Profile::validate`], which deserializing runs and the limiters' `build`
//! and `reload` run again, so a profile changed in Rust is refused exactly as YAML is.
//!
//! Every refusal is a [`ProfileError`] that names the field, says its
//! [kind](ProfileErrorKind) and, where the YAML parser knows it, the line and column.
//! Durations are an integer and one unit of `ms`, `s`, `m`, `h`, `d` (`"250ms"`, `"1s"`,
//! `"1d"`), as the reference profile documents.
//!
//! ```
//! use tollgate::profile::{ProfileErrorKind, Tokens};
//! use tollgate::Profile;
//!
//! let mut p = Profile::from_path("examples/profiles/example.yaml")?;
//! assert_eq!(Tokens::new(0).unwrap_err().kind(), ProfileErrorKind::Invalid);
//! p.routes[0].class = "no_such_class".into();
//! assert_eq!(p.validate().unwrap_err().kind(), ProfileErrorKind::Invalid);
//! # Ok::<(), tollgate::ProfileError>(())
//! ```

mod descriptors;
pub(crate) mod error;
mod observability;
mod ordered_map;
mod period;
mod scalars;
pub(crate) mod schema;
mod shape;
mod validate;
mod yaml;

pub use descriptors::{
    DescriptorRule, Descriptors, EntryKey, Unmatched, MAX_DESCRIPTOR_RULES, MAX_ENTRY_KEY_LEN,
};
pub use error::ProfileErrorKind;
// One public path each: `tollgate::ProfileError`, `tollgate::Profile`, `tollgate::CatalogEntry`.
pub(crate) use error::ProfileError;
pub use observability::{
    Observability, SdkToken, SdkVersions, DEFAULT_NEAR_LIMIT, MAX_SDK_TOKEN_LEN, MAX_SDK_VERSIONS,
};
pub use ordered_map::{OrderedMap, MAX_NAME_LEN};
pub use period::Period;
pub use scalars::{
    Capacity, Code, Prefix, Ratio, Shards, Share, Slots, Tokens, TypeUri, Weight, MAX_CAPACITY,
    MAX_CODE_LEN, MAX_PERIOD_NANOS, MAX_SHARDS, MAX_SLOTS_PER_WINDOW, MAX_TOKENS, MAX_TYPE_URI_LEN,
    MAX_WEIGHT,
};
pub use schema::{
    Anonymous, BucketLimit, Catalog, CatalogCode, ErrorBudget, Identities, LeasePolicy, Mode,
    RetryAfterPolicy, Route, RouteClassLimits, SharedCapacity, Store, TenantPolicy,
    DEFAULT_IDENTITY_SHARE,
};
pub(crate) use schema::{CatalogEntry, Profile};
pub use shape::{MAX_PROFILE_ALIAS_NODES, MAX_PROFILE_NESTING};
pub use yaml::MAX_PROFILE_BYTES;
