//! Whose bucket: keys, route class handles, and the keyed 128-bit digest the table stores.
//!
//! Authenticated traffic is keyed by tenant, principal and route class; unauthenticated traffic
//! by the caller's network prefix (hashed) and route class, never by anyone's tenant id. Keys
//! borrow their strings; the limiter hashes them with its secret into a [`Digest`] and keeps
//! only that, so the table never holds a raw tenant or principal string.

use core::fmt;
use core::hash::Hasher;
use std::net::IpAddr;

mod hasher;
pub(crate) mod network;

pub(crate) use hasher::KeyHasher;

/// The longest tenant or principal id, in bytes.
pub const MAX_ID_LEN: usize = 1024;

/// A route class of one limiter's profile, resolved once by [`crate::Limiter::route_class`] so
/// that `admit` does no string lookup. Meaningful only for the limiter that issued it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteClass(pub(crate) u32);

impl RouteClass {
    /// The class's position in the profile's `route_classes` (the C ABI passes this number).
    pub fn index(self) -> u32 {
        self.0
    }

    /// The handle of the class at `index` of a limiter's profile, for callers that pass classes
    /// by number (the C ABI). Check `index` against the profile's class count first: a limiter
    /// asked to admit a class it does not have panics.
    pub fn from_index(index: u32) -> RouteClass {
        RouteClass(index)
    }
}

/// Who is asking, for which route class. Build one per request; it borrows its strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key<'a> {
    pub(crate) who: Who<'a>,
    pub(crate) class: RouteClass,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Who<'a> {
    Authenticated { tenant: &'a str, principal: &'a str },
    Anonymous(IpAddr),
}

/// Why a key was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The tenant id is empty.
    EmptyTenant,
    /// The principal id is empty.
    EmptyPrincipal,
    /// The tenant or principal id is longer than [`MAX_ID_LEN`] bytes.
    TooLong,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyError::EmptyTenant => "tenant id is empty",
            KeyError::EmptyPrincipal => "principal id is empty",
            KeyError::TooLong => "tenant or principal id is longer than 1024 bytes",
        })
    }
}

impl std::error::Error for KeyError {}

impl<'a> Key<'a> {
    /// An authenticated caller: `tenant` and `principal` as the service's own authentication
    /// verified them. Both must be 1 to [`MAX_ID_LEN`] bytes.
    pub fn authenticated(
        tenant: &'a str,
        principal: &'a str,
        class: RouteClass,
    ) -> Result<Key<'a>, KeyError> {
        if tenant.is_empty() {
            return Err(KeyError::EmptyTenant);
        }
        if principal.is_empty() {
            return Err(KeyError::EmptyPrincipal);
        }
        if tenant.len() > MAX_ID_LEN || principal.len() > MAX_ID_LEN {
            return Err(KeyError::TooLong);
        }
        Ok(Key {
            who: Who::Authenticated { tenant, principal },
            class,
        })
    }

    /// An unauthenticated caller, grouped with its network prefix (`anonymous.ipv4_prefix` or
    /// `ipv6_prefix` of the profile). For fairness all anonymous traffic is one pseudo-tenant.
    pub fn anonymous(peer: IpAddr, class: RouteClass) -> Key<'static> {
        Key {
            who: Who::Anonymous(peer),
            class,
        }
    }

    /// The route class.
    pub fn class(&self) -> RouteClass {
        self.class
    }

    /// The tenant, or `None` for the anonymous class.
    pub fn tenant(&self) -> Option<&'a str> {
        match self.who {
            Who::Authenticated { tenant, .. } => Some(tenant),
            Who::Anonymous(_) => None,
        }
    }
}

/// Whose partition and fairness share a decision counts in: the anonymous callers, a tenant
/// by name (its digest computed only if asked for), or a tenant whose digest is known.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Tenant<'a> {
    Anonymous,
    Named(&'a str),
    Known(Digest),
}

impl<'a> Tenant<'a> {
    /// The tenant of `key`, by name.
    #[inline]
    pub(crate) fn of(key: &Key<'a>) -> Tenant<'a> {
        key.tenant().map_or(Tenant::Anonymous, Tenant::Named)
    }

    /// Whether it is an authenticated caller's tenant.
    #[inline]
    pub(crate) fn authenticated(self) -> bool {
        !matches!(self, Tenant::Anonymous)
    }

    /// Its digest (hashing the name if it must).
    #[inline]
    pub(crate) fn digest(self, hasher: &KeyHasher) -> Digest {
        match self {
            Tenant::Anonymous => hasher.anonymous_tenant,
            Tenant::Named(t) => hasher.tenant_digest(Some(t)),
            Tenant::Known(d) => d,
        }
    }
}

/// A caller resolved for the table: its route class, its identity's digest and its tenant.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Resolved<'a> {
    pub(crate) class: RouteClass,
    pub(crate) digest: Digest,
    pub(crate) tenant: Tenant<'a>,
}

/// A keyed 128-bit digest of an identity and route class. Never zero (the table's "nobody").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Digest {
    pub(crate) hi: u64,
    pub(crate) lo: u64,
}

impl Digest {
    /// No identity: an unused or released slot.
    pub(crate) const NONE: Digest = Digest { hi: 0, lo: 0 };

    /// The digest the two hash states have made: the low bit set, so it is never [`NONE`].
    ///
    /// [`NONE`]: Digest::NONE
    #[inline]
    fn finished(hi: &ahash::AHasher, lo: &ahash::AHasher) -> Digest {
        Digest {
            hi: hi.finish(),
            lo: lo.finish() | 1,
        }
    }
}

/// A hasher for maps keyed by [`Digest`]: the digest is already keyed and uniform, so mixing
/// its halves is enough (no second SipHash on the hot path).
#[derive(Default, Clone, Copy)]
pub(crate) struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = self.0.rotate_left(32) ^ v;
    }
}

/// A map keyed by digests.
pub(crate) type DigestMap<V> =
    std::collections::HashMap<Digest, V, core::hash::BuildHasherDefault<DigestHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        let c = RouteClass(0);
        assert_eq!(Key::authenticated("", "p", c), Err(KeyError::EmptyTenant));
        assert_eq!(
            Key::authenticated("t", "", c),
            Err(KeyError::EmptyPrincipal)
        );
        let long = "x".repeat(MAX_ID_LEN + 1);
        assert_eq!(Key::authenticated(&long, "p", c), Err(KeyError::TooLong));
        assert!(Key::authenticated(&long[..MAX_ID_LEN], "p", c).is_ok());
    }
}
