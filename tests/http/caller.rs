//! `tollgate::http` callers: whose bucket a request is charged to, trusted proxy networks, and
//! client addresses behind proxies.

use std::net::{IpAddr, SocketAddr};

use http::{HeaderMap, HeaderValue, Request};
use tollgate::http::{
    Caller, Cidr, ForwardedHeader, KeyExtractor, PeerExtractor, VerifiedIdentity,
};
use tollgate::KeyError;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn cidrs_parse_and_contain() {
    let n: Cidr = "10.1.2.3/8".parse().unwrap();
    assert_eq!(n.to_string(), "10.0.0.0/8");
    assert!(n.contains(ip("10.255.0.1")));
    assert!(n.contains(ip("::ffff:10.0.0.1")));
    assert!(!n.contains(ip("11.0.0.1")));
    let v6: Cidr = "2001:db8::/32".parse().unwrap();
    assert!(v6.contains(ip("2001:db8:ffff::1")));
    assert!(!v6.contains(ip("10.0.0.1")));
    let host: Cidr = "192.0.2.1".parse().unwrap();
    assert_eq!(host.to_string(), "192.0.2.1/32");
    let all: Cidr = "0.0.0.0/0".parse().unwrap();
    assert!(all.contains(ip("203.0.113.9")));
    for bad in ["10.0.0.0/33", "10.0.0/8", "x", "::/129", "10.0.0.0/"] {
        assert!(bad.parse::<Cidr>().is_err(), "{bad}");
    }
}

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_static(v));
    }
    h
}

#[test]
fn forwarded_addresses_are_believed_only_from_trusted_proxies() {
    let x = PeerExtractor::new().trust_proxies([
        "10.0.0.0/8".parse().unwrap(),
        "2001:db8::/32".parse().unwrap(),
    ]);
    let spoof = headers(&[("x-forwarded-for", "1.2.3.4")]);
    // Untrusted peer: its headers are ignored.
    assert_eq!(x.client_ip(ip("203.0.113.5"), &spoof), ip("203.0.113.5"));
    // Trusted peer: the rightmost untrusted entry, whatever the client wrote to its left.
    let chain = headers(&[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.2")]);
    assert_eq!(x.client_ip(ip("10.0.0.1"), &chain), ip("198.51.100.7"));
    // Several header lines are one list, in order.
    let lines = headers(&[
        ("x-forwarded-for", "6.6.6.6"),
        ("x-forwarded-for", "198.51.100.8"),
    ]);
    assert_eq!(x.client_ip(ip("10.0.0.1"), &lines), ip("198.51.100.8"));
    // All trusted: the leftmost proxy is as far as the chain goes.
    let inner = headers(&[("x-forwarded-for", "10.9.9.9")]);
    assert_eq!(x.client_ip(ip("10.0.0.1"), &inner), ip("10.9.9.9"));
    // Garbage stops the walk at the last trusted hop.
    let junk = headers(&[("x-forwarded-for", "1.1.1.1, not-an-ip")]);
    assert_eq!(x.client_ip(ip("10.0.0.1"), &junk), ip("10.0.0.1"));
    // No header: the peer itself.
    assert_eq!(
        x.client_ip(ip("10.0.0.1"), &HeaderMap::new()),
        ip("10.0.0.1")
    );
    // Proxies that write X-Forwarded-For: a client's own `Forwarded` is not read.
    let forged = headers(&[
        ("forwarded", "for=6.6.6.6"),
        ("x-forwarded-for", "198.51.100.9"),
    ]);
    assert_eq!(x.client_ip(ip("10.0.0.1"), &forged), ip("198.51.100.9"));

    // Proxies that write RFC 7239 Forwarded: quotes, ports, brackets, other parameters.
    let f = x.clone().forwarded_header(ForwardedHeader::Forwarded);
    let fwd = headers(&[
        ("forwarded", "for=6.6.6.6, for=\"[2001:db8:cafe::17]:4711\""),
        ("x-forwarded-for", "5.5.5.5"),
    ]);
    assert_eq!(f.client_ip(ip("10.0.0.1"), &fwd), ip("6.6.6.6"));
    let fwd = headers(&[
        ("forwarded", "for=\"198.51.100.3:999\", for=10.0.0.5"),
        ("x-forwarded-for", "5.5.5.5"),
    ]);
    assert_eq!(f.client_ip(ip("10.0.0.1"), &fwd), ip("198.51.100.3"));
    let fwd = headers(&[("forwarded", "for=192.0.2.60;proto=http;by=203.0.113.43")]);
    assert_eq!(f.client_ip(ip("10.0.0.1"), &fwd), ip("192.0.2.60"));
    let hidden = headers(&[("forwarded", "for=unknown")]);
    assert_eq!(f.client_ip(ip("10.0.0.1"), &hidden), ip("10.0.0.1"));
    let forged = headers(&[("x-forwarded-for", "6.6.6.6")]);
    assert_eq!(f.client_ip(ip("10.0.0.1"), &forged), ip("10.0.0.1"));
}

#[test]
fn the_verified_identity_wins_over_the_address() {
    let x = PeerExtractor::new();
    let mut req = Request::new(());
    req.extensions_mut()
        .insert(SocketAddr::from(([192, 0, 2, 1], 5555)));
    assert_eq!(x.caller(&req), Caller::Anonymous(ip("192.0.2.1")));
    let id = VerifiedIdentity::new("acme", "alice").unwrap();
    req.extensions_mut().insert(id.clone());
    assert_eq!(x.caller(&req), Caller::Verified(id));
    // No peer address at all: one shared bucket, never unlimited.
    assert_eq!(
        x.caller(&Request::new(())),
        Caller::Anonymous(ip("0.0.0.0"))
    );
    assert_eq!(
        VerifiedIdentity::new("", "a").unwrap_err(),
        KeyError::EmptyTenant
    );
    assert_eq!(
        VerifiedIdentity::new("t", "").unwrap_err(),
        KeyError::EmptyPrincipal
    );
    assert!(!format!("{:?}", VerifiedIdentity::new("acme", "alice").unwrap()).contains("acme"));
}
