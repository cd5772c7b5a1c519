//! The limiter's keyed hash of identities: two independently seeded aHash states make the
//! 128 bits of a [`Digest`], with tags that keep tenants, identities and networks apart.

use core::hash::{BuildHasher, Hasher};
use std::net::IpAddr;

use super::network::{canonical, mask128, mask32};
use super::{Digest, Key, Resolved, Tenant, Who};

/// Hashes keys with the limiter's secret: two independently seeded aHash states make the 128
/// bits. aHash is keyed and built for hash-flooding resistance, at a few ns for short ids.
#[derive(Clone)]
pub(crate) struct KeyHasher {
    hi: ahash::RandomState,
    lo: ahash::RandomState,
    /// Both states with the tenant tag already written: every authenticated digest starts so,
    /// and starting from a copy takes one multiply off each state's dependency chain (the
    /// digests are the same as writing the tag each time).
    tenant_prefix: (ahash::AHasher, ahash::AHasher),
    v4_prefix: u8,
    v6_prefix: u8,
    /// All anonymous traffic is one pseudo-tenant for fairness.
    pub(super) anonymous_tenant: Digest,
}

const TAG_AUTHENTICATED: u8 = 1;
const TAG_ANONYMOUS: u8 = 2;
const TAG_TENANT: u8 = 3;
const TAG_ANONYMOUS_TENANT: u8 = 4;
const TAG_FINGERPRINT: u8 = 5;

impl KeyHasher {
    /// Seeds both states from `secret`. The same secret and prefixes give the same digests in
    /// every process that runs the same build of tollgate: aHash's output is its version's and
    /// its target features' (AES or not), which is why snapshots carry the fingerprint.
    pub(crate) fn new(secret: &[u8], v4_prefix: u8, v6_prefix: u8) -> KeyHasher {
        // Fixed, arbitrary constants (digits of pi) only spread the secret into 8 seeds.
        let spread = ahash::RandomState::with_seeds(
            0x243f_6a88_85a3_08d3,
            0x1319_8a2e_0370_7344,
            0xa409_3822_299f_31d0,
            0x082e_fa98_ec4e_6c89,
        );
        let seed = |i: u64| {
            let mut h = spread.build_hasher();
            h.write_u64(i);
            h.write(secret);
            h.finish()
        };
        let hi = ahash::RandomState::with_seeds(seed(0), seed(1), seed(2), seed(3));
        let lo = ahash::RandomState::with_seeds(seed(4), seed(5), seed(6), seed(7));
        // Written, not `hash_one`: on nightly aHash specialises `hash_one` for integers (its
        // build script enables `specialize`), which gave the anonymous tenant another digest
        // than a stable build, under the same fingerprint, so a snapshot restored across the
        // two put anonymous identities in a partition nobody else is counted in.
        let (mut anon_hi, mut anon_lo) = (hi.build_hasher(), lo.build_hasher());
        feed(&mut anon_hi, &mut anon_lo, |h| {
            h.write_u8(TAG_ANONYMOUS_TENANT)
        });
        let anonymous_tenant = Digest::finished(&anon_hi, &anon_lo);
        let (mut tenant_hi, mut tenant_lo) = (hi.build_hasher(), lo.build_hasher());
        feed(&mut tenant_hi, &mut tenant_lo, |h| {
            h.write_u64(u64::from(TAG_TENANT))
        });
        KeyHasher {
            hi,
            lo,
            tenant_prefix: (tenant_hi, tenant_lo),
            v4_prefix,
            v6_prefix,
            anonymous_tenant,
        }
    }

    /// The identity's digest and its tenant's (the tenant's capacity counter and shard) in one
    /// pass: the tenant's hash state is finished once for the tenant and then extended with the
    /// route class and principal for the identity, so the tenant's bytes are hashed once.
    #[inline]
    pub(crate) fn digests(&self, key: &Key<'_>) -> (Digest, Digest) {
        match key.who {
            Who::Authenticated { tenant, principal } => {
                // The tenant tag is written (`tenant_prefix`). aHash mixes each `write`'s
                // length in, so ("ab", "c") and ("a", "bc") differ; the tags keep tenants,
                // identities and networks apart.
                let (mut hi, mut lo) = self.tenant_prefix.clone();
                feed(&mut hi, &mut lo, |h| h.write(tenant.as_bytes()));
                let of_tenant = Digest::finished(&hi, &lo);
                feed(&mut hi, &mut lo, |h| {
                    h.write_u64(u64::from(TAG_AUTHENTICATED) | u64::from(key.class.0) << 8);
                    h.write(principal.as_bytes());
                });
                (Digest::finished(&hi, &lo), of_tenant)
            }
            Who::Anonymous(ip) => {
                let (mut hi, mut lo) = (self.hi.build_hasher(), self.lo.build_hasher());
                let (prefix, len) = self.network_prefix(ip);
                feed(&mut hi, &mut lo, |h| {
                    h.write_u64(
                        u64::from(TAG_ANONYMOUS)
                            | u64::from(key.class.0) << 8
                            | u64::from(len) << 40,
                    );
                    h.write_u64(prefix as u64);
                    h.write_u64((prefix >> 64) as u64);
                });
                (Digest::finished(&hi, &lo), self.anonymous_tenant)
            }
        }
    }

    /// `key` resolved: with `tenant`, the tenant's digest computed in the same pass (shared
    /// capacity needs it on every decision); without, only when asked for.
    #[inline]
    pub(crate) fn resolve<'a>(&self, key: &Key<'a>, tenant: bool) -> Resolved<'a> {
        let (digest, tenant) = match Tenant::of(key) {
            // The anonymous pseudo-tenant's digest is the hasher's, known without a pass.
            Tenant::Named(_) if tenant => {
                let (d, t) = self.digests(key);
                (d, Tenant::Known(t))
            }
            of => (self.digest(key), of),
        };
        Resolved {
            class: key.class,
            digest,
            tenant,
        }
    }

    /// The identity's digest alone (the first of [`KeyHasher::digests`]): without shared
    /// capacity the tenant's is needed only to claim a slot, so the hot path does not finish it.
    #[inline]
    pub(crate) fn digest(&self, key: &Key<'_>) -> Digest {
        match key.who {
            Who::Authenticated { tenant, principal } => {
                let (mut hi, mut lo) = self.tenant_prefix.clone();
                feed(&mut hi, &mut lo, |h| {
                    h.write(tenant.as_bytes());
                    h.write_u64(u64::from(TAG_AUTHENTICATED) | u64::from(key.class.0) << 8);
                    h.write(principal.as_bytes());
                });
                Digest::finished(&hi, &lo)
            }
            Who::Anonymous(_) => self.digests(key).0,
        }
    }

    /// The digest of a tenant as a whole (as `digests` computes it), or of the anonymous
    /// pseudo-tenant for `None`.
    pub(crate) fn tenant_digest(&self, tenant: Option<&str>) -> Digest {
        match tenant {
            None => self.anonymous_tenant,
            Some(t) => {
                let (mut hi, mut lo) = self.tenant_prefix.clone();
                feed(&mut hi, &mut lo, |h| h.write(t.as_bytes()));
                Digest::finished(&hi, &lo)
            }
        }
    }

    /// A keyed hash that names this hasher's keying without revealing the secret: what a
    /// snapshot records so that a restore under another secret (or a build that hashes
    /// differently, which would give every identity another digest) is refused. Derived like
    /// every digest, under a tag of its own, so it says no more than the digests beside it.
    pub(crate) fn fingerprint(&self) -> [u8; 16] {
        let (mut hi, mut lo) = (self.hi.build_hasher(), self.lo.build_hasher());
        feed(&mut hi, &mut lo, |h| {
            h.write_u64(u64::from(TAG_FINGERPRINT));
            h.write(b"tollgate snapshot fingerprint");
        });
        let mut out = [0; 16];
        out[..8].copy_from_slice(&hi.finish().to_le_bytes());
        out[8..].copy_from_slice(&lo.finish().to_le_bytes());
        out
    }

    /// The caller's network as (masked address, prefix length); IPv4-mapped IPv6 addresses
    /// count as IPv4, and IPv4 lengths are offset so that no v4 network equals a v6 one.
    pub(crate) fn network_prefix(&self, ip: IpAddr) -> (u128, u8) {
        match canonical(ip) {
            IpAddr::V4(v4) => (
                u128::from(mask32(u32::from(v4), self.v4_prefix)),
                200 + self.v4_prefix,
            ),
            IpAddr::V6(v6) => (mask128(u128::from(v6), self.v6_prefix), self.v6_prefix),
        }
    }
}

#[inline]
fn feed(hi: &mut ahash::AHasher, lo: &mut ahash::AHasher, f: impl Fn(&mut ahash::AHasher)) {
    f(hi);
    f(lo);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::RouteClass;

    fn h() -> KeyHasher {
        KeyHasher::new(b"secret", 24, 56)
    }

    #[test]
    fn digests_separate_fields_and_classes() {
        let h = h();
        let d = |t, p, c| h.digests(&Key::authenticated(t, p, RouteClass(c)).unwrap());
        assert_ne!(d("ab", "c", 0), d("a", "bc", 0));
        assert_ne!(d("a", "b", 0), d("a", "b", 1));
        assert_eq!(d("a", "b", 0), d("a", "b", 0));
        let other = KeyHasher::new(b"other", 24, 56);
        let k = Key::authenticated("a", "b", RouteClass(0)).unwrap();
        assert_ne!(h.digests(&k), other.digests(&k));
    }

    #[test]
    fn the_identity_digest_alone_is_the_pairs_first() {
        let h = h();
        for k in [
            Key::authenticated("tenant-001", "user-000000000", RouteClass(3)).unwrap(),
            Key::authenticated("a", "b", RouteClass(0)).unwrap(),
            Key::anonymous("192.0.2.1".parse().unwrap(), RouteClass(1)),
        ] {
            assert_eq!(h.digest(&k), h.digests(&k).0);
            assert_eq!(h.tenant_digest(k.tenant()), h.digests(&k).1);
        }
    }

    #[test]
    fn anonymous_groups_by_prefix() {
        let h = h();
        let d = |s: &str| h.digests(&Key::anonymous(s.parse().unwrap(), RouteClass(0)));
        assert_eq!(d("192.0.2.1"), d("192.0.2.200"));
        assert_ne!(d("192.0.2.1"), d("192.0.3.1"));
        assert_eq!(d("::ffff:192.0.2.7"), d("192.0.2.1"));
        assert_eq!(d("2001:db8:0:1::1"), d("2001:db8:0:ff::2"));
        assert_ne!(d("2001:db8:0:100::1"), d("2001:db8:0:1::1"));
        assert_ne!(d("0.0.0.0"), d("::"));
    }

    /// Starting from `tenant_prefix` gives the digests that writing the tag gives (the values
    /// snapshots and the Redis keys of a fleet depend on).
    #[test]
    fn the_tenant_prefix_changes_no_digest() {
        let h = h();
        let written = |s: &ahash::RandomState, parts: &[&[u8]], class: u32| {
            let mut x = s.build_hasher();
            x.write_u64(u64::from(TAG_TENANT));
            x.write(parts[0]);
            if parts.len() > 1 {
                x.write_u64(u64::from(TAG_AUTHENTICATED) | u64::from(class) << 8);
                x.write(parts[1]);
            }
            x.finish()
        };
        for (t, p, c) in [("acme", "alice", 0), ("tenant-001", "user-000000000", 3)] {
            let (id, tenant) = h.digests(&Key::authenticated(t, p, RouteClass(c)).unwrap());
            let both: &[&[u8]] = &[t.as_bytes(), p.as_bytes()];
            assert_eq!(id.hi, written(&h.hi, both, c));
            assert_eq!(id.lo, written(&h.lo, both, c) | 1);
            assert_eq!(tenant.hi, written(&h.hi, &[t.as_bytes()], c));
            assert_eq!(tenant.lo, written(&h.lo, &[t.as_bytes()], c) | 1);
        }
    }

    #[test]
    fn tenant_digests_agree_and_differ_from_identities() {
        let h = h();
        let (id, tenant) = h.digests(&Key::authenticated("acme", "alice", RouteClass(0)).unwrap());
        assert_eq!(tenant, h.tenant_digest(Some("acme")));
        assert_ne!(id, tenant);
        let (_, anon) = h.digests(&Key::anonymous("192.0.2.1".parse().unwrap(), RouteClass(0)));
        assert_eq!(anon, h.tenant_digest(None));
        assert_ne!(anon, h.tenant_digest(Some("")));
    }
}
