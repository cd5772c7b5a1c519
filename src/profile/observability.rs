//! `observability:` the operator signals a profile tunes beyond the decision counters: when an
//! admission counts as near the limit, and which client SDK versions get a label of their own.
//!
//! ```yaml
//! observability:
//!   near_limit: 0.2                  # admitted with less than 20% of the burst left
//!   sdk_versions:                    # User-Agent product tokens labelled in metrics
//!     - tollgate-client/0.1.0        # this exact version
//!     - tollgate-client              # any other version of it
//! ```

use core::fmt;
use std::collections::HashSet;

use serde::{Deserialize, Deserializer, Serialize};

use super::error::{value_error, ProfileError};
use super::scalars::Ratio;

/// The default `observability.near_limit`: an admission that leaves less than a fifth of the
/// burst counts as near the limit, the same point as Envoy's `near_limit` (80% used).
pub const DEFAULT_NEAR_LIMIT: f64 = 0.2;
/// The most entries of `observability.sdk_versions`: each is a label value of its own, so the
/// list bounds the series a client population can create.
pub const MAX_SDK_VERSIONS: usize = 32;
/// The longest entry of `observability.sdk_versions`, in bytes.
pub const MAX_SDK_TOKEN_LEN: usize = 64;

/// `observability:` (all optional).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observability {
    /// An admission that leaves less than this share of the caller's burst counts in
    /// `tollgate_near_limit_total` (default [`DEFAULT_NEAR_LIMIT`]; 0 counts none).
    #[serde(default = "default_near_limit")]
    pub near_limit: Ratio,
    /// The client products and versions that get their own `sdk` label in
    /// `tollgate_sdk_decisions_total` (the tower layer); every other `User-Agent` is `other`,
    /// none at all is `none`. Empty (the default): the layer does not read `User-Agent`.
    #[serde(default, skip_serializing_if = "SdkVersions::is_empty")]
    pub sdk_versions: SdkVersions,
}

fn default_near_limit() -> Ratio {
    Ratio::new(DEFAULT_NEAR_LIMIT).expect("0.2 is a ratio")
}

impl Default for Observability {
    fn default() -> Self {
        Observability {
            near_limit: default_near_limit(),
            sdk_versions: SdkVersions::default(),
        }
    }
}

impl Observability {
    /// True when nothing differs from the defaults (the section is then not serialized).
    pub fn is_default(&self) -> bool {
        *self == Observability::default()
    }
}

/// One product token as `User-Agent` carries it (RFC 9110 section 10.1.5): `product` (any
/// version of it) or `product/version`, each part 1 or more token characters, 64 bytes at most.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct SdkToken(String);

/// RFC 9110 `tchar`: what a product name or version may contain.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl SdkToken {
    /// The token if it is `product` or `product/version` of token characters, at most 64
    /// bytes, else an `Invalid` error.
    pub fn new(token: impl Into<String>) -> Result<SdkToken, ProfileError> {
        let token = token.into();
        let part_ok = |p: &str| !p.is_empty() && p.bytes().all(is_tchar);
        let ok = token.len() <= MAX_SDK_TOKEN_LEN
            && match token.split_once('/') {
                Some((product, version)) => part_ok(product) && part_ok(version),
                None => part_ok(&token),
            };
        if ok {
            Ok(SdkToken(token))
        } else {
            Err(ProfileError::invalid(format!(
                "invalid product token {token:?}, expected `product` or `product/version` \
                 (letters, digits and !#$%&'*+-.^_`|~, at most {MAX_SDK_TOKEN_LEN} bytes)"
            )))
        }
    }

    /// The token, as it appears in the `sdk` label.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SdkToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SdkToken {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        SdkToken::new(String::deserialize(d)?).map_err(value_error)
    }
}

/// `observability.sdk_versions`: at most [`MAX_SDK_VERSIONS`] distinct product tokens.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct SdkVersions(Vec<SdkToken>);

impl SdkVersions {
    /// The list if it has at most [`MAX_SDK_VERSIONS`] entries, none twice (and none named
    /// `other` or `none`, the labels kept for everything else), else an `Invalid` error.
    pub fn new(tokens: Vec<SdkToken>) -> Result<SdkVersions, ProfileError> {
        if tokens.len() > MAX_SDK_VERSIONS {
            return Err(ProfileError::invalid(format!(
                "{} product tokens, expected at most {MAX_SDK_VERSIONS} (each is a label value)",
                tokens.len()
            )));
        }
        let mut seen = HashSet::with_capacity(tokens.len());
        for t in &tokens {
            if matches!(t.as_str(), "other" | "none") {
                return Err(ProfileError::invalid(format!(
                    "product token {:?} is reserved: `other` and `none` label everything not listed",
                    t.as_str()
                )));
            }
            if !seen.insert(t.as_str()) {
                return Err(ProfileError::invalid(format!(
                    "product token {:?} is listed twice",
                    t.as_str()
                )));
            }
        }
        Ok(SdkVersions(tokens))
    }

    /// The tokens in the profile's order.
    pub fn iter(&self) -> impl Iterator<Item = &SdkToken> {
        self.0.iter()
    }

    /// True when no token is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many tokens are listed.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl<'de> Deserialize<'de> for SdkVersions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        SdkVersions::new(Vec::<SdkToken>::deserialize(d)?).map_err(value_error)
    }
}
