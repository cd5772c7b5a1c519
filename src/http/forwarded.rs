//! The client address behind trusted proxies: `X-Forwarded-For` or RFC 7239 `Forwarded`, read
//! from the right, so that nothing a client writes itself is believed.

use std::net::{IpAddr, SocketAddr};

use ::http::header::{HeaderMap, HeaderName};

use super::cidr::Cidr;
use crate::identity::network::canonical;

/// Which header trusted proxies append the client address to. Only one is read: reading the
/// other as well would let a client forge the one its proxies do not write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the common one; the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:4711"`.
    Forwarded,
}

const FORWARDED: HeaderName = HeaderName::from_static("forwarded");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The client address of a request that came from `peer` with `headers`: while the address is
/// inside a `trusted` network, the next entry from the right of `header` is believed; the
/// first untrusted address is the client. See [`PeerExtractor`](super::PeerExtractor).
#[inline]
pub(crate) fn client_ip(
    peer: IpAddr,
    headers: &HeaderMap,
    header: ForwardedHeader,
    trusted: &[Cidr],
) -> IpAddr {
    // No trusted proxy (the default): the peer is the client, and no header is looked at.
    if trusted.is_empty() {
        return canonical(peer);
    }
    through_proxies(peer, headers, header, trusted)
}

/// [`client_ip`] behind trusted proxies: the header walked from the right.
#[inline(never)]
fn through_proxies(
    peer: IpAddr,
    headers: &HeaderMap,
    header: ForwardedHeader,
    trusted: &[Cidr],
) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|n| n.contains(ip));
    let mut client = canonical(peer);
    if !is_trusted(client) {
        return client;
    }
    let (name, parse): (HeaderName, fn(&str) -> Option<IpAddr>) = match header {
        ForwardedHeader::XForwardedFor => (X_FORWARDED_FOR, forwarded_ip),
        ForwardedHeader::Forwarded => (FORWARDED, forwarded_for),
    };
    for value in headers.get_all(name).iter().rev() {
        let Ok(text) = value.to_str() else {
            return client;
        };
        for element in text.rsplit(',') {
            match parse(element) {
                Some(ip) => {
                    client = canonical(ip);
                    if !is_trusted(client) {
                        return client;
                    }
                }
                // Unreadable or obfuscated (`unknown`): the last proxy that wrote a
                // readable hop is as far as the chain can be believed.
                None => return client,
            }
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, possibly with a port.
fn forwarded_ip(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    s.parse::<IpAddr>()
        .ok()
        .or_else(|| s.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// The `for=` parameter of one RFC 7239 `Forwarded` element.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    let value = element.split(';').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        k.trim().eq_ignore_ascii_case("for").then_some(v.trim())
    })?;
    let value = value.trim_matches('"');
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split_once(']')?.0.parse::<IpAddr>().ok();
    }
    forwarded_ip(value)
}
