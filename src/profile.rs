//! The profile: route classes and their buckets, identity table size, shared capacity,
//! catalog codes. YAML, validated as a whole before anything uses it.
//!
//! Every invalid profile is refused with a [`ProfileError`] that names the field and, where the
//! YAML parser knows it, the line and column. Durations are an integer and one unit of `ms`, `s`,
//! `m`, `h`, `d` (`"250ms"`, `"1s"`, `"1d"`), as the reference profile documents.

use core::fmt;
use core::time::Duration;
use std::path::Path;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::bucket::{MAX_PERIOD_NANOS, MAX_TOKENS};
use crate::decision::CatalogEntry;

/// The largest `identities.capacity`: 2^30 slots (64 GiB of table).
pub const MAX_CAPACITY: u64 = 1 << 30;
/// The most shards `shared_capacity.shards` may have.
pub const MAX_SHARDS: u32 = 1 << 16;

/// A validated profile. Build one with [`Profile::from_yaml`] or [`Profile::from_path`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The profile's name, for logs and the discovery document.
    pub name: String,
    /// `enforce` (default) or `shadow`: in shadow mode every request is admitted and the
    /// decision that would have been made is only reported, for rolling out a new profile.
    #[serde(default, skip_serializing_if = "Mode::is_enforce")]
    pub mode: Mode,
    /// Whether responses may tell callers their own remaining tokens (the `RateLimit` header).
    /// Never anyone else's.
    #[serde(default, skip_serializing_if = "core::ops::Not::not")]
    pub expose_remaining: bool,
    /// The identity table.
    pub identities: Identities,
    /// How unauthenticated callers are grouped.
    #[serde(default)]
    pub anonymous: Anonymous,
    /// The route classes in the order the profile lists them; every identity has a burst and
    /// a sustained bucket per class.
    pub route_classes: OrderedMap<RouteClassLimits>,
    /// Admission slots that tenants of one shard share; absent means no shared ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_capacity: Option<SharedCapacity>,
    /// Method and path to route class, first match wins (used by the HTTP middleware).
    #[serde(default)]
    pub routes: Vec<Route>,
    /// How `Retry-After` is sent.
    #[serde(default)]
    pub retry_after: RetryAfterPolicy,
    /// What callers see for each kind of refusal.
    #[serde(default)]
    pub catalog: Catalog,
    /// When capacity-class rejections become an alert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_budget: Option<ErrorBudget>,
    /// The shared store (Redis backend).
    #[serde(default)]
    pub store: Store,
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
    Period(Duration::from_millis(50))
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
    /// Identity slots (each 64 bytes); at most [`MAX_CAPACITY`].
    pub capacity: Capacity,
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
    Prefix(24)
}
fn default_v6() -> Prefix<128> {
    Prefix(56)
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
    pub slots_per_window: Tokens,
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
    /// Pins the tenant to a shard instead of the hashed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
}

fn default_weight() -> Weight {
    Weight(1.0)
}

/// One entry of `routes:`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// An HTTP method, or `*` for any.
    pub method: String,
    /// A path glob: `*` matches one segment, `**` the rest.
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
            max: Period(Duration::from_secs(3600)),
        }
    }
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
}

impl Catalog {
    /// The entry for one kind of refusal.
    pub fn entry(&self, e: CatalogEntry) -> &CatalogCode {
        match e {
            CatalogEntry::Throttled => &self.throttled,
            CatalogEntry::OverCapacity => &self.over_capacity,
            CatalogEntry::LimiterUnavailable => &self.limiter_unavailable,
        }
    }
}

fn code(code: &str) -> CatalogCode {
    CatalogCode {
        code: code.to_owned(),
        type_uri: "about:blank".to_owned(),
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

impl Default for Catalog {
    fn default() -> Self {
        Catalog {
            throttled: default_throttled(),
            over_capacity: default_over_capacity(),
            limiter_unavailable: default_limiter_unavailable(),
        }
    }
}

/// One catalog entry: the stable `code` and the RFC 9457 problem `type` URI.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogCode {
    /// Lowercase letters, digits and `_`.
    pub code: String,
    /// The problem type URI (default `about:blank`).
    #[serde(rename = "type", default = "about_blank")]
    pub type_uri: String,
}

fn about_blank() -> String {
    "about:blank".to_owned()
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

// ---------------------------------------------------------------------------------------------
// Validated scalars. Each refuses a bad value while parsing, so the error carries its location.

macro_rules! scalar {
    ($(#[$m:meta])* $name:ident($t:ty), $expect:literal, |$v:ident| $ok:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize)]
        #[serde(transparent)]
        pub struct $name(pub $t);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let $v = <$t>::deserialize(d)?;
                if $ok {
                    Ok($name($v))
                } else {
                    Err(de::Error::custom(format_args!(
                        "invalid value {}, expected {}",
                        $v, $expect
                    )))
                }
            }
        }
    };
}

scalar!(
    /// A token count, 1 to 2^32 - 1.
    Tokens(u64), "a whole number of tokens from 1 to 4294967295",
    |v| (1..=MAX_TOKENS).contains(&v)
);
scalar!(
    /// `identities.capacity`, 1 to 2^30.
    Capacity(u64), "a capacity from 1 to 1073741824 slots",
    |v| (1..=MAX_CAPACITY).contains(&v)
);
scalar!(
    /// `shared_capacity.shards`, 1 to 65536.
    Shards(u32), "a shard count from 1 to 65536",
    |v| (1..=MAX_SHARDS).contains(&v)
);
scalar!(
    /// A fraction in (0, 1].
    Share(f64), "a share greater than 0 and at most 1",
    |v| v > 0.0 && v <= 1.0
);
scalar!(
    /// A ratio in [0, 1].
    Ratio(f64), "a ratio from 0 to 1",
    |v| (0.0..=1.0).contains(&v)
);
scalar!(
    /// A tenant weight, finite and greater than 0.
    Weight(f64), "a weight greater than 0",
    |v| v.is_finite() && v > 0.0
);

impl Eq for Tokens {}
impl Eq for Capacity {}
impl Eq for Shards {}

/// A network prefix length, 0 to `MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Prefix<const MAX: u8>(pub u8);

impl<'de, const MAX: u8> Deserialize<'de> for Prefix<MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = u8::deserialize(d)?;
        if v <= MAX {
            Ok(Prefix(v))
        } else {
            Err(de::Error::custom(format_args!(
                "invalid value {v}, expected a prefix length from 0 to {MAX}"
            )))
        }
    }
}

/// A non-zero duration written as an integer and a unit (`ms`, `s`, `m`, `h`, `d`), at most
/// 366 days.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Period(pub Duration);

impl Period {
    /// Parses `"250ms"`, `"1s"`, `"5m"`, `"1h"`, `"1d"`.
    pub fn parse(s: &str) -> Result<Period, String> {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (num, unit) = s.split_at(digits);
        let unit_ms: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => {
                return Err(format!(
                    "invalid duration {s:?}, expected an integer and one unit of ms, s, m, h, d \
                     (\"250ms\", \"1s\", \"1h\")"
                ))
            }
        };
        let n: u64 = num
            .parse()
            .map_err(|_| format!("invalid duration {s:?}, expected an integer before the unit"))?;
        let nanos = n
            .checked_mul(unit_ms)
            .and_then(|ms| ms.checked_mul(1_000_000))
            .filter(|&ns| ns <= MAX_PERIOD_NANOS)
            .ok_or_else(|| format!("invalid duration {s:?}, expected at most 366d"))?;
        if nanos == 0 {
            return Err(format!(
                "invalid duration {s:?}, expected a duration greater than zero"
            ));
        }
        Ok(Period(Duration::from_nanos(nanos)))
    }

    /// The duration in nanoseconds (fits in 60 bits).
    pub fn as_nanos(self) -> u64 {
        self.0.as_nanos() as u64
    }
}

impl fmt::Display for Period {
    /// The largest unit that divides the duration exactly, so that parsing it gives it back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis() as u64;
        for (unit, size) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1_000),
        ] {
            if ms % size == 0 {
                return write!(f, "{}{unit}", ms / size);
            }
        }
        write!(f, "{ms}ms")
    }
}

impl Serialize for Period {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Period {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Period;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"250ms\", \"1s\" or \"1h\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Period, E> {
                Period::parse(s).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// A YAML mapping that keeps the profile's order (route class handles follow it) and refuses
/// duplicate and empty names.
#[derive(Clone, Debug, PartialEq)]
pub struct OrderedMap<V>(pub Vec<(String, V)>);

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        OrderedMap(Vec::new())
    }
}

impl<V> OrderedMap<V> {
    /// The entry named `name`.
    pub fn get(&self, name: &str) -> Option<&V> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
    /// Position of `name` in profile order.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.0.iter().position(|(k, _)| k == name)
    }
    /// Entries in profile order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V: Serialize> Serialize for OrderedMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct M<V>(core::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for M<V> {
            type Value = OrderedMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of names")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(String, V)> = Vec::new();
                while let Some(k) = m.next_key::<String>()? {
                    if k.is_empty() || k.len() > 64 {
                        return Err(de::Error::custom(format_args!(
                            "invalid name {k:?}, expected 1 to 64 bytes"
                        )));
                    }
                    if out.iter().any(|(e, _)| *e == k) {
                        return Err(de::Error::custom(format_args!("duplicate name {k:?}")));
                    }
                    let v = m.next_value()?;
                    out.push((k, v));
                }
                Ok(OrderedMap(out))
            }
        }
        d.deserialize_map(M(core::marker::PhantomData))
    }
}

// ---------------------------------------------------------------------------------------------
// Errors and whole-profile checks.

/// Why a profile was refused: a message naming the field, and the position where known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileError {
    message: String,
    line: Option<usize>,
    column: Option<usize>,
}

impl ProfileError {
    /// A whole-profile refusal (on reload) with no position.
    pub(crate) fn refused(message: String) -> Self {
        ProfileError {
            message,
            line: None,
            column: None,
        }
    }

    fn at(message: String, pos: Option<(usize, usize)>) -> Self {
        ProfileError {
            message,
            line: pos.map(|p| p.0),
            column: pos.map(|p| p.1),
        }
    }
    /// What is wrong, naming the field.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// 1-based line of the offending value, where known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }
    /// 1-based column of the offending value, where known.
    pub fn column(&self) -> Option<usize> {
        self.column
    }
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(
                f,
                "invalid profile at line {l} column {c}: {}",
                self.message
            ),
            _ => write!(f, "invalid profile: {}", self.message),
        }
    }
}

impl std::error::Error for ProfileError {}

impl Profile {
    /// Parses and validates a profile.
    pub fn from_yaml(src: &str) -> Result<Profile, ProfileError> {
        check_shape(src)?;
        let de = serde_yaml_ng::Deserializer::from_str(src);
        let profile: Profile = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            // serde_yaml_ng puts its own (shorter) path in front and the position at the end;
            // both are replaced by the full field path and the position of the field itself.
            let mut msg = inner.to_string();
            if let Some(i) = msg.rfind(" at line ") {
                msg.truncate(i);
            }
            if let Some((head, rest)) = msg.split_once(": ") {
                if !head.contains(' ') {
                    msg = rest.to_owned();
                }
            }
            let pos = inner.location().map(|l| {
                let last = path.rsplit('.').next().unwrap_or("");
                refine_position(src, (l.line(), l.column()), last)
            });
            let msg = if path == "." {
                msg
            } else {
                format!("{path}: {msg}")
            };
            ProfileError::at(msg, pos)
        })?;
        profile.check(src)?;
        Ok(profile)
    }

    /// Reads, parses and validates a profile file.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Profile, ProfileError> {
        let path = path.as_ref();
        let src = std::fs::read_to_string(path)
            .map_err(|e| ProfileError::at(format!("cannot read {}: {e}", path.display()), None))?;
        Profile::from_yaml(&src).map_err(|e| ProfileError {
            message: format!("{}: {}", path.display(), e.message),
            ..e
        })
    }

    /// The checks that span several fields. `src` is only used to find positions.
    fn check(&self, src: &str) -> Result<(), ProfileError> {
        let err = |msg: String, key: &str, value: &str| {
            Err(ProfileError::at(msg, find_key_value(src, key, value)))
        };
        if self.name.trim().is_empty() {
            return err("name: must not be empty".into(), "name", "");
        }
        if self.route_classes.is_empty() {
            return err(
                "route_classes: at least one route class is needed".into(),
                "route_classes",
                "",
            );
        }
        for (i, r) in self.routes.iter().enumerate() {
            if self.route_classes.get(&r.class).is_none() {
                let known: Vec<&str> = self.route_classes.iter().map(|(k, _)| k).collect();
                return err(
                    format!(
                        "routes[{i}].class: unknown route class {:?}, expected one of {known:?}",
                        r.class
                    ),
                    "class",
                    &r.class,
                );
            }
            let method_ok = r.method == "*"
                || (!r.method.is_empty() && r.method.bytes().all(|b| b.is_ascii_uppercase()));
            if !method_ok {
                return err(
                    format!("routes[{i}].method: invalid method {:?}, expected `*` or an upper-case HTTP method", r.method),
                    "method",
                    &r.method,
                );
            }
            if !r.path.starts_with('/') {
                return err(
                    format!(
                        "routes[{i}].path: invalid path {:?}, expected a path starting with `/`",
                        r.path
                    ),
                    "path",
                    &r.path,
                );
            }
        }
        if let Some(sc) = &self.shared_capacity {
            if sc.slots_per_window.0 > crate::capacity::MAX_SLOTS_PER_WINDOW {
                return err(
                    format!(
                        "shared_capacity.slots_per_window: invalid value {}, expected at most {}",
                        sc.slots_per_window.0,
                        crate::capacity::MAX_SLOTS_PER_WINDOW
                    ),
                    "slots_per_window",
                    &sc.slots_per_window.0.to_string(),
                );
            }
            for (name, t) in sc.tenants.iter() {
                if let Some(s) = t.shard.filter(|&s| s >= sc.shards.0) {
                    return err(
                        format!(
                            "shared_capacity.tenants.{name}.shard: invalid value {s}, expected a shard below shards ({})",
                            sc.shards.0
                        ),
                        "shard",
                        &s.to_string(),
                    );
                }
            }
        }
        if self.retry_after.max.0 < Duration::from_secs(1) {
            return err(
                format!(
                    "retry_after.max: invalid value {}, expected at least 1s",
                    self.retry_after.max
                ),
                "max",
                &self.retry_after.max.to_string(),
            );
        }
        for (field, c) in [
            ("throttled", &self.catalog.throttled),
            ("over_capacity", &self.catalog.over_capacity),
            ("limiter_unavailable", &self.catalog.limiter_unavailable),
        ] {
            let ok = !c.code.is_empty()
                && c.code
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !ok {
                return err(
                    format!("catalog.{field}.code: invalid code {:?}, expected lower-case letters, digits and `_`", c.code),
                    "code",
                    &c.code,
                );
            }
            if c.type_uri.is_empty() {
                return err(
                    format!("catalog.{field}.type: must not be empty"),
                    field,
                    "",
                );
            }
        }
        Ok(())
    }

    /// The limits of a route class by name.
    pub fn route_class(&self, name: &str) -> Option<&RouteClassLimits> {
        self.route_classes.get(name)
    }
}

/// The largest profile source, in bytes.
pub const MAX_PROFILE_BYTES: usize = 4 << 20;
/// The deepest nesting of flow collections (`[`, `{`) a profile may have; the reference
/// profile nests three deep.
pub const MAX_PROFILE_NESTING: usize = 32;

/// Refuses, before the YAML parser sees it, a source too large or nested too deep: the parser
/// takes time quadratic in the nesting depth (64 KiB of `{a: ` took seconds).
fn check_shape(src: &str) -> Result<(), ProfileError> {
    if src.len() > MAX_PROFILE_BYTES {
        return Err(ProfileError::at(
            format!(
                "the profile is {} bytes, more than the {MAX_PROFILE_BYTES} allowed",
                src.len()
            ),
            None,
        ));
    }
    let (mut depth, mut quote) = (0usize, None);
    for (ln, line) in src.lines().enumerate() {
        for (col, c) in line.char_indices() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') => break,
                (None, '[' | '{') => {
                    depth += 1;
                    if depth > MAX_PROFILE_NESTING {
                        return Err(ProfileError::at(
                            format!("collections nested more than {MAX_PROFILE_NESTING} deep"),
                            Some((ln + 1, col + 1)),
                        ));
                    }
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}

/// serde_yaml_ng reports a bad scalar at the mapping that holds it; the value of `key` at or
/// after that position is where the user should look.
fn refine_position(src: &str, (line, column): (usize, usize), key: &str) -> (usize, usize) {
    let at = src
        .lines()
        .nth(line.saturating_sub(1))
        .and_then(|l| l.get(column.saturating_sub(1)..));
    let is_mapping = at.is_some_and(|t| {
        let name = t
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        t.starts_with('{') || (name > 0 && t[name..].trim_start().starts_with(':'))
    });
    if !is_mapping || key.is_empty() || key.contains('[') {
        return (line, column);
    }
    let tail: String = src
        .lines()
        .skip(line.saturating_sub(1))
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                // Blank out what precedes the mapping on its first line, keeping columns.
                let cut = column.saturating_sub(1).min(l.len());
                format!("{}{}\n", " ".repeat(cut), &l[cut..])
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    match find_key_value(&tail, key, "") {
        Some((l, _)) => {
            let text = tail.lines().nth(l - 1).unwrap_or("");
            let at = text
                .find(&format!("{key}:"))
                .or_else(|| text.find(key))
                .unwrap_or(0);
            let after = &text[at + key.len()..];
            let value = after.trim_start_matches([':', ' ', '\t']);
            (line + l - 1, text.len() - value.len() + 1)
        }
        None => (line, column),
    }
}

/// Finds `key: value` (block or flow style, value optionally quoted) in the source, for a
/// position on checks that run after parsing. `value` empty matches the key alone.
fn find_key_value(src: &str, key: &str, value: &str) -> Option<(usize, usize)> {
    for (ln, line) in src.lines().enumerate() {
        let mut from = 0;
        while let Some(i) = line[from..].find(key) {
            let start = from + i;
            from = start + key.len();
            let before_ok = start == 0
                || matches!(
                    line.as_bytes()[start - 1],
                    b' ' | b'{' | b',' | b'-' | b'\t'
                );
            let rest = line[from..].trim_start();
            let Some(rest) = rest.strip_prefix(':') else {
                continue;
            };
            if !before_ok {
                continue;
            }
            let rest = rest.trim_start();
            let rest = rest.trim_start_matches(['"', '\'']);
            if value.is_empty() || rest.starts_with(value) {
                let col = if value.is_empty() {
                    start
                } else {
                    line.len() - rest.len()
                };
                return Some((ln + 1, col + 1));
            }
        }
    }
    None
}
