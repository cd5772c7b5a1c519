//! IP networks in CIDR notation: which peers are trusted proxies.

use core::fmt;
use core::str::FromStr;
use std::net::{IpAddr, Ipv4Addr};

use crate::identity::network::{canonical, mask128, mask32};

/// An IP network in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`; a bare address is a /32 or
/// /128), for the list of trusted proxies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    len: u8,
}

/// Why a CIDR was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CidrError(String);

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CidrError {}

impl Cidr {
    /// The network `addr/len`, host bits cleared; `None` if `len` is too long for the family.
    pub fn new(addr: IpAddr, len: u8) -> Option<Cidr> {
        let network = match addr {
            IpAddr::V4(v4) if len <= 32 => IpAddr::V4(Ipv4Addr::from(mask32(u32::from(v4), len))),
            IpAddr::V6(v6) if len <= 128 => IpAddr::V6(mask128(u128::from(v6), len).into()),
            _ => return None,
        };
        Some(Cidr { network, len })
    }

    /// True when `ip` is inside the network (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => mask32(u32::from(a), self.len) == u32::from(n),
            (IpAddr::V6(n), IpAddr::V6(a)) => mask128(u128::from(a), self.len) == u128::from(n),
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let bad = || CidrError(format!("invalid network {s:?}, expected e.g. 10.0.0.0/8"));
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let len = match len {
            Some(l) => l.trim().parse::<u8>().map_err(|_| bad())?,
            None if addr.is_ipv4() => 32,
            None => 128,
        };
        Cidr::new(addr, len).ok_or_else(bad)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.len)
    }
}
