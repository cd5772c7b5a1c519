//! The discovery document: the effective limits, safe to show to anyone (served as JSON, e.g. at
//! `/.well-known/rate-limits`). Both backends publish the same document for the same profile;
//! `config` derives it once per profile.

use serde::Serialize;

use crate::profile::{Catalog, Mode, Period};

/// The discovery document: the effective limits, safe to show to anyone.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PublishedLimits {
    /// The profile's name.
    pub profile: String,
    /// The profile's default mode.
    pub mode: Mode,
    /// Every route class, in handle order.
    pub route_classes: Vec<PublishedClass>,
    /// The cap on Retry-After.
    pub retry_after_max: Period,
    /// The catalog codes and problem types callers may see.
    pub catalog: Catalog,
    /// The shared-capacity window, if there is shared capacity (no usage, no tenants).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_capacity: Option<PublishedCapacity>,
    /// The fleet profile's version in force (Redis backend, when the profile came from
    /// `FleetProfile::publish`); absent otherwise, so documents without it read the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile_version: Option<u64>,
}

/// One route class in the discovery document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PublishedClass {
    /// The class name.
    pub name: String,
    /// Whether refusals are enforced.
    pub mode: Mode,
    /// The burst bucket.
    pub burst: PublishedBucket,
    /// The sustained bucket.
    pub sustained: PublishedBucket,
    /// The routes of the profile that map to this class.
    pub routes: Vec<PublishedRoute>,
}

/// A bucket in the discovery document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PublishedBucket {
    /// Capacity and refill per period.
    pub tokens: u64,
    /// The period.
    pub per: Period,
}

/// A route in the discovery document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PublishedRoute {
    /// HTTP method or `*`.
    pub method: String,
    /// Path glob.
    pub path: String,
}

/// Shared capacity in the discovery document: only its window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PublishedCapacity {
    /// Capacity refusals end at the next window boundary.
    pub window: Period,
}
