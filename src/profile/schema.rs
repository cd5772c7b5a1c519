//! The profile's structs, field for field the YAML schema of `examples/profiles/example.yaml`.
//! Every scalar in them is a validated type; what spans several fields is checked by
//! [`Profile::validate`], which every way of making a `Profile` from serde runs.

use serde::{Deserialize, Serialize};

use super::descriptors::Descriptors;
use super::error::ProfileError;
use super::observability::Observability;
use super::ordered_map::OrderedMap;
use super::period::Period;
use super::scalars::{
    Capacity, Code, Prefix, Ratio, Shards, Share, Slots, Tokens, TypeUri, Weight,
};

/// A validated profile. Build one with [`Profile::from_yaml`] or [`Profile::from_path`], or
/// deserialize it from any serde format (which validates the same way). A profile changed in
/// Rust is checked again by [`Profile::validate`], which the limiters' `build` and `reload`
/// run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawProfile")]
pub struct Profile {
    /// The profile's name, for logs and the discovery document.
    pub name: String,
    /// `enforce` (default) or `shadow`: in shadow mode every request is admitted and the
    /// decision that would have been made is only reported, for rolling out a new profile.
    #[serde(skip_serializing_if = "Mode::is_enforce")]
    pub mode: Mode,
    /// Whether responses may tell callers their own remaining tokens (the `RateLimit` header).
    /// Never anyone else's.
    #[serde(skip_serializing_if = "core::ops::Not::not")]
    pub expose_remaining: bool,
    /// The identity table.
    pub identities: Identities,
    /// How unauthenticated callers are grouped.
    pub anonymous: Anonymous,
    /// The route classes in the order the profile lists them; every identity has a burst and
    /// a sustained bucket per class.
    pub route_classes: OrderedMap<RouteClassLimits>,
    /// Admission slots that tenants of one shard share; absent means no shared ceiling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_capacity: Option<SharedCapacity>,
    /// Method and path to route class, first match wins (used by the HTTP middleware).
    pub routes: Vec<Route>,
    /// How `Retry-After` is sent.
    pub retry_after: RetryAfterPolicy,
    /// What callers see for each kind of refusal.
    pub catalog: Catalog,
    /// When capacity-class rejections become an alert.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_budget: Option<ErrorBudget>,
    /// The shared store (Redis backend).
    pub store: Store,
    /// Operator signals: the near-limit threshold, the SDK versions labelled in metrics.
    #[serde(skip_serializing_if = "Observability::is_default")]
    pub observability: Observability,
    /// How `tollgate-server` maps Envoy rate limit descriptors to keys; absent for a profile
    /// used only in process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub descriptors: Option<Descriptors>,
}

/// [`Profile`] as parsed, before the checks that span fields. Only `Profile`'s deserializer
/// and `from_yaml` (which adds positions to those checks) see it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "struct Profile")]
pub(super) struct RawProfile {
    name: String,
    #[serde(default)]
    mode: Mode,
    #[serde(default)]
    expose_remaining: bool,
    identities: Identities,
    #[serde(default)]
    anonymous: Anonymous,
    route_classes: OrderedMap<RouteClassLimits>,
    #[serde(default)]
    shared_capacity: Option<SharedCapacity>,
    #[serde(default)]
    routes: Vec<Route>,
    #[serde(default)]
    retry_after: RetryAfterPolicy,
    #[serde(default)]
    catalog: Catalog,
    #[serde(default)]
    error_budget: Option<ErrorBudget>,
    #[serde(default)]
    store: Store,
    #[serde(default)]
    observability: Observability,
    descriptors: Option<Descriptors>,
}

impl RawProfile {
    /// The profile, not yet checked across fields.
    pub(super) fn unchecked(self) -> Profile {
        Profile {
            name: self.name,
            mode: self.mode,
            expose_remaining: self.expose_remaining,
            identities: self.identities,
            anonymous: self.anonymous,
            route_classes: self.route_classes,
            shared_capacity: self.shared_capacity,
            routes: self.routes,
            retry_after: self.retry_after,
            catalog: self.catalog,
            error_budget: self.error_budget,
            store: self.store,
            observability: self.observability,
            descriptors: self.descriptors,
        }
    }
}

impl TryFrom<RawProfile> for Profile {
    type Error = ProfileError;
    fn try_from(raw: RawProfile) -> Result<Profile, ProfileError> {
        let p = raw.unchecked();
        p.validate()?;
        Ok(p)
    }
}

impl Profile {
    /// The limits of a route class by name.
    pub fn route_class(&self, name: &str) -> Option<&RouteClassLimits> {
        self.route_classes.get(name)
    }
}

/// `mode:` whether decisions are enforced or only reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Refusals are refused.
    #[default]
    Enforce,
    /// Everything is admitted; refusals are only counted and reported.
    Shadow,
}

impl Mode {
    fn is_enforce(&self) -> bool {
        *self == Mode::Enforce
    }
}

/// `store:` the shared store of the Redis backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Store {
    /// The longest a decision may wait for the store before it fails closed (default 50ms).
    #[serde(default = "default_store_timeout")]
    pub timeout: Period,
}

fn default_store_timeout() -> Period {
    Period::from_millis(50).expect("50ms is a period")
}

impl Default for Store {
    fn default() -> Self {
        Store {
            timeout: default_store_timeout(),
        }
    }
}

/// `identities:`
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identities {
    /// Identity slots (each 64 bytes); at most [`MAX_CAPACITY`](super::MAX_CAPACITY).
    pub capacity: Capacity,
    /// The most of the slots one tenant (or the anonymous pseudo-tenant) may hold:
    /// `ceil(capacity * tenant_share * weight)`, weights from `shared_capacity.tenants`
    /// (default 1). A tenant at its cap may still reuse its own refilled slots, but takes no
    /// slot from anyone else: a flood of new identities in one tenant never refuses another
    /// tenant's identity. Default [`DEFAULT_IDENTITY_SHARE`] (0.5).
    #[serde(default = "default_identity_share")]
    pub tenant_share: Share,
}

/// The default `identities.tenant_share`: no tenant, and not the anonymous callers together,
/// may hold more than half of the identity table.
pub const DEFAULT_IDENTITY_SHARE: f64 = 0.5;

fn default_identity_share() -> Share {
    Share::new(DEFAULT_IDENTITY_SHARE).expect("0.5 is a share")
}

/// `anonymous:` network prefixes that group unauthenticated callers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Anonymous {
    /// IPv4 prefix length, 0 to 32 (default 24).
    #[serde(default = "default_v4")]
    pub ipv4_prefix: Prefix<32>,
    /// IPv6 prefix length, 0 to 128 (default 56).
    #[serde(default = "default_v6")]
    pub ipv6_prefix: Prefix<128>,
}

fn default_v4() -> Prefix<32> {
    Prefix::new(24).expect("24 <= 32")
}
fn default_v6() -> Prefix<128> {
    Prefix::new(56).expect("56 <= 128")
}

impl Default for Anonymous {
    fn default() -> Self {
        Anonymous {
            ipv4_prefix: default_v4(),
            ipv6_prefix: default_v6(),
        }
    }
}

/// One route class's two buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteClassLimits {
    /// Overrides the profile's `mode` for this class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// The short-period bucket.
    pub burst: BucketLimit,
    /// The long-period bucket.
    pub sustained: BucketLimit,
    /// Leased tokens (Redis backend): a worker takes up to `max_tokens` of an identity's
    /// tokens from the store in one call and spends them locally for at most `ttl`. No effect
    /// on the embedded limiter, whose every decision is local already.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeasePolicy>,
}

/// `lease: { max_tokens, ttl }` of a route class: how many of an identity's tokens one worker
/// may take from the store ahead of need, and for how long it may spend them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeasePolicy {
    /// The largest lease, at most the class's smaller bucket (and, with shared capacity, the
    /// shard's slots per window). Leases start at one token and grow toward it.
    pub max_tokens: Tokens,
    /// How long a lease may be spent after its tokens were taken, at most the burst's `per`:
    /// then its unspent rest goes back to the store.
    pub ttl: Period,
}

/// `{ tokens, per }`: capacity `tokens`, refilling `tokens` per `per`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketLimit {
    /// Capacity and refill amount, 1 to 2^32 - 1.
    pub tokens: Tokens,
    /// Refill period, at most 366 days.
    pub per: Period,
}

/// `shared_capacity:`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedCapacity {
    /// Fairness domains; tenants map to one each.
    pub shards: Shards,
    /// The admission window.
    pub window: Period,
    /// Admission slots per shard per window.
    pub slots_per_window: Slots,
    /// The most of its shard's slots one tenant (of weight 1) may hold in a window.
    pub tenant_share: Share,
    /// Listed tenants; unlisted ones have weight 1 and a hashed shard.
    #[serde(default)]
    pub tenants: OrderedMap<TenantPolicy>,
}

/// One listed tenant under `shared_capacity.tenants`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantPolicy {
    /// Multiplies `tenant_share` (default 1).
    #[serde(default = "default_weight")]
    pub weight: Weight,
    /// Pins the tenant to a shard instead of the hashed one; below `shards`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
}

fn default_weight() -> Weight {
    Weight::new(1.0).expect("1 is a weight")
}

/// One entry of `routes:`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// An upper-case HTTP method, or `*` for any.
    pub method: String,
    /// A path glob starting with `/`: `*` matches one segment, `**` the rest.
    pub path: String,
    /// The route class, one of `route_classes`.
    pub class: String,
}

/// `retry_after:`
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryAfterPolicy {
    /// The cap on `Retry-After` (default 1h), at least 1s.
    pub max: Period,
}

impl Default for RetryAfterPolicy {
    fn default() -> Self {
        RetryAfterPolicy {
            max: Period::from_secs(3600).expect("1h is a period"),
        }
    }
}

/// Which catalog entry of the profile a decision maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CatalogEntry {
    /// `catalog.throttled`: the caller's own quota (429).
    Throttled,
    /// `catalog.over_capacity`: shared capacity (503).
    OverCapacity,
    /// `catalog.limiter_unavailable`: the limiter's store (503).
    LimiterUnavailable,
    /// `catalog.cost_exceeds`: a weighted request costs more than the caller's bucket holds
    /// (429, no `Retry-After`).
    CostExceeds,
}

/// `catalog:` what callers see. The codes are stable API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// The caller's own quota (429).
    #[serde(default = "default_throttled")]
    pub throttled: CatalogCode,
    /// Shared capacity (503).
    #[serde(default = "default_over_capacity")]
    pub over_capacity: CatalogCode,
    /// The limiter's store (503).
    #[serde(default = "default_limiter_unavailable")]
    pub limiter_unavailable: CatalogCode,
    /// A weighted request whose cost is more than the caller's bucket can hold (429). Optional:
    /// `cost_exceeds_limit` by default, so profiles written before weighted cost keep working.
    #[serde(default = "default_cost_exceeds")]
    pub cost_exceeds: CatalogCode,
}

impl Catalog {
    /// The entry for one kind of refusal.
    pub fn entry(&self, e: CatalogEntry) -> &CatalogCode {
        match e {
            CatalogEntry::Throttled => &self.throttled,
            CatalogEntry::OverCapacity => &self.over_capacity,
            CatalogEntry::LimiterUnavailable => &self.limiter_unavailable,
            CatalogEntry::CostExceeds => &self.cost_exceeds,
        }
    }
}

fn code(code: &str) -> CatalogCode {
    CatalogCode {
        code: Code::new(code).expect("the default codes are codes"),
        type_uri: about_blank(),
    }
}
fn default_throttled() -> CatalogCode {
    code("rate_limited")
}
fn default_over_capacity() -> CatalogCode {
    code("over_capacity")
}
fn default_limiter_unavailable() -> CatalogCode {
    code("limiter_unavailable")
}
fn default_cost_exceeds() -> CatalogCode {
    code("cost_exceeds_limit")
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog {
            throttled: default_throttled(),
            over_capacity: default_over_capacity(),
            limiter_unavailable: default_limiter_unavailable(),
            cost_exceeds: default_cost_exceeds(),
        }
    }
}

/// One catalog entry: the stable `code` and the RFC 9457 problem `type` URI.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogCode {
    /// Lower-case letters, digits and `_`.
    pub code: Code,
    /// The problem type URI (default `about:blank`).
    #[serde(rename = "type", default = "about_blank")]
    pub type_uri: TypeUri,
}

fn about_blank() -> TypeUri {
    TypeUri::new("about:blank").expect("about:blank is a URI")
}

/// `error_budget:`
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBudget {
    /// The largest acceptable share of decisions refused for capacity, 0 to 1.
    pub capacity_rejections: Ratio,
    /// The window over which that share is measured.
    pub window: Period,
}
