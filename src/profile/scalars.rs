//! Validated scalars: each has a private field and a fallible `new`, and deserializes through
//! it, so no path (YAML, any other serde format, Rust) builds one out of range.

use core::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::error::{value_error, ProfileError};

/// The most tokens a bucket may hold: a bucket's credit is `tokens` emission intervals, and
/// this keeps every product of the bucket math inside 64 bits.
pub const MAX_TOKENS: u64 = u32::MAX as u64;
/// The longest period (366 days) in nanoseconds. The engine keeps times as 59-bit nanoseconds
/// and a bucket's arrival time never runs more than 2^56 ns (above a period) ahead of the clock.
pub const MAX_PERIOD_NANOS: u64 = 366 * 24 * 3600 * 1_000_000_000;
/// The most slots a shard may have per window: the count shares one word with the window id,
/// in 24 bits.
pub const MAX_SLOTS_PER_WINDOW: u64 = (1 << 24) - 1;
/// The largest `identities.capacity`: 2^30 slots (64 GiB of table).
pub const MAX_CAPACITY: u64 = 1 << 30;
/// The most shards `shared_capacity.shards` may have.
pub const MAX_SHARDS: u32 = 1 << 16;
/// The largest tenant weight. A weight of `1 / tenant_share` already gives a tenant all of its
/// shard's slots; far larger ones only say nothing more (and `1e308` times a share overflows).
pub const MAX_WEIGHT: f64 = 1_000_000.0;
/// The longest catalog code, in bytes.
pub const MAX_CODE_LEN: usize = 64;
/// The longest catalog problem type URI, in bytes.
pub const MAX_TYPE_URI_LEN: usize = 2048;

macro_rules! scalar {
    ($(#[$m:meta])* $name:ident($t:ty), $expect:literal, |$v:ident| $ok:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize)]
        #[serde(transparent)]
        pub struct $name($t);

        impl $name {
            #[doc = concat!("The value if it is ", $expect, ", else an `Invalid` error.")]
            pub fn new($v: $t) -> Result<Self, ProfileError> {
                if $ok {
                    Ok($name($v))
                } else {
                    Err(ProfileError::invalid(format!(
                        "invalid value {}, expected {}",
                        $v, $expect
                    )))
                }
            }

            /// The value.
            #[inline]
            pub fn get(self) -> $t {
                self.0
            }
        }

        impl TryFrom<$t> for $name {
            type Error = ProfileError;
            fn try_from(v: $t) -> Result<Self, ProfileError> {
                $name::new(v)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $name::new(<$t>::deserialize(d)?).map_err(value_error)
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
    /// `shared_capacity.slots_per_window`, 1 to 2^24 - 1.
    Slots(u64), "a slot count from 1 to 16777215",
    |v| (1..=MAX_SLOTS_PER_WINDOW).contains(&v)
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
    /// A tenant weight, greater than 0 and at most [`MAX_WEIGHT`].
    Weight(f64), "a weight greater than 0 and at most 1000000",
    |v| v > 0.0 && v <= MAX_WEIGHT
);

// The float scalars refuse NaN, so they are totally ordered in fact; the integers say so, and
// `Share` too (it is part of `Identities`, which is `Eq`).
impl Eq for Tokens {}
impl Eq for Slots {}
impl Eq for Capacity {}
impl Eq for Shards {}
impl Eq for Share {}

/// A network prefix length, 0 to `MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Prefix<const MAX: u8>(u8);

impl<const MAX: u8> Prefix<MAX> {
    /// The prefix length if it is at most `MAX`, else an `Invalid` error.
    pub fn new(v: u8) -> Result<Self, ProfileError> {
        if v <= MAX {
            Ok(Prefix(v))
        } else {
            Err(ProfileError::invalid(format!(
                "invalid value {v}, expected a prefix length from 0 to {MAX}"
            )))
        }
    }

    /// The prefix length in bits.
    #[inline]
    pub fn get(self) -> u8 {
        self.0
    }
}

impl<'de, const MAX: u8> Deserialize<'de> for Prefix<MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Prefix::new(u8::deserialize(d)?).map_err(value_error)
    }
}

/// A catalog code: 1 to 64 lower-case letters, digits and `_`. Codes are stable API that
/// callers match on; they go into problem bodies, logs, and any header an application copies
/// them into, so nothing in them needs escaping and no CR or LF can split a header.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Code(String);

impl Code {
    /// The code if it is 1 to 64 bytes of `a-z`, `0-9` and `_`, else an `Invalid` error.
    pub fn new(code: impl Into<String>) -> Result<Code, ProfileError> {
        let code = code.into();
        let ok = !code.is_empty()
            && code.len() <= MAX_CODE_LEN
            && code
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if ok {
            Ok(Code(code))
        } else {
            Err(ProfileError::invalid(format!(
                "invalid code {code:?}, expected 1 to {MAX_CODE_LEN} lower-case letters, digits \
                 and `_`"
            )))
        }
    }

    /// The code.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A catalog problem type URI (RFC 9457 `type`), such as `about:blank` or
/// `https://errors.example.com/over-capacity`: 1 to 2048 bytes of the characters RFC 3986
/// allows in a URI (letters, digits, `-._~:/?#[]@!$&'()*+,;=%`). No space, quote, backslash or
/// control character, so it is safe in a JSON string and in a header (`Link`) as it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct TypeUri(String);

impl TypeUri {
    /// The URI if it is 1 to 2048 bytes of URI characters, else an `Invalid` error.
    pub fn new(uri: impl Into<String>) -> Result<TypeUri, ProfileError> {
        let uri = uri.into();
        let ok = !uri.is_empty()
            && uri.len() <= MAX_TYPE_URI_LEN
            && uri
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~:/?#[]@!$&'()*+,;=%".contains(&b));
        if ok {
            Ok(TypeUri(uri))
        } else {
            Err(ProfileError::invalid(format!(
                "invalid type URI {uri:?}, expected 1 to {MAX_TYPE_URI_LEN} bytes of URI \
                 characters (no space, quote or control character)"
            )))
        }
    }

    /// The URI.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Code::new(String::deserialize(d)?).map_err(value_error)
    }
}

impl<'de> Deserialize<'de> for TypeUri {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        TypeUri::new(String::deserialize(d)?).map_err(value_error)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for TypeUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
