//! Addresses as tollgate groups and matches them: IPv4-mapped IPv6 addresses as IPv4, and
//! addresses cut to a prefix length. Anonymous callers' networks and trusted proxy networks
//! (`http::Cidr`) both go through these.

use std::net::IpAddr;

/// `ip`, with an IPv4-mapped IPv6 address as the IPv4 address it maps: a dual-stack socket
/// reports IPv4 peers that way, and they must match IPv4 networks and share IPv4 prefixes.
#[inline]
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The first `len` bits of an IPv4 address (`len` at most 32; 0 keeps none).
#[inline]
pub(crate) fn mask32(bits: u32, len: u8) -> u32 {
    bits & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

/// The first `len` bits of an IPv6 address (`len` at most 128; 0 keeps none).
#[inline]
pub(crate) fn mask128(bits: u128, len: u8) -> u128 {
    bits & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}
