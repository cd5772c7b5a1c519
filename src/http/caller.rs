//! Who is asking: whose bucket a request is charged to. An authenticated caller by tenant and
//! principal (never by address), anyone else by the network prefix of their address.

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use ::http::header::HeaderMap;
use ::http::{Extensions, Request};

use super::cidr::Cidr;
use super::forwarded::{client_ip, ForwardedHeader};
use crate::identity::{Key, KeyError, RouteClass};

/// The caller as the service's own authentication verified it. The authentication layer
/// inserts it into the request extensions; the layer then keys the request by tenant and
/// principal, never by address.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct VerifiedIdentity {
    tenant: Arc<str>,
    principal: Arc<str>,
}

impl VerifiedIdentity {
    /// Checks the ids as [`Key::authenticated`] does (1 to [`MAX_ID_LEN`](crate::MAX_ID_LEN)
    /// bytes each), so that an identity in the extensions always makes a key.
    pub fn new(tenant: &str, principal: &str) -> Result<VerifiedIdentity, KeyError> {
        // The class does not take part in the checks.
        Key::authenticated(tenant, principal, RouteClass(0))?;
        Ok(VerifiedIdentity {
            tenant: tenant.into(),
            principal: principal.into(),
        })
    }

    /// The tenant id.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The principal id.
    pub fn principal(&self) -> &str {
        &self.principal
    }
}

impl fmt::Debug for VerifiedIdentity {
    /// Ids stay out of debug output, which tends to end up in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifiedIdentity").finish_non_exhaustive()
    }
}

/// Whose bucket a request is charged to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// An authenticated caller: tenant and principal.
    Verified(VerifiedIdentity),
    /// An unauthenticated caller, grouped by network prefix (the anonymous class).
    Anonymous(IpAddr),
}

impl Caller {
    /// The limiter key for this caller and route class.
    pub fn key(&self, class: RouteClass) -> Key<'_> {
        match self {
            Caller::Verified(id) => Key::authenticated(&id.tenant, &id.principal, class)
                .expect("VerifiedIdentity::new checked the ids"),
            Caller::Anonymous(ip) => Key::anonymous(*ip, class),
        }
    }
}

/// Maps a request to its [`Caller`].
pub trait KeyExtractor: Send + Sync + 'static {
    /// Who is calling.
    fn caller<B>(&self, request: &Request<B>) -> Caller;

    /// Runs `f` on the limiter key of the request's caller for `class`: what the layer calls
    /// when it decides at once. The default goes through [`KeyExtractor::caller`]; an extractor
    /// that can borrow the ids from the request overrides it, so that no reference count is
    /// touched per request (an `Arc` count is a line every core writes).
    fn with_key<B, R>(
        &self,
        request: &Request<B>,
        class: RouteClass,
        f: impl FnOnce(&Key<'_>) -> R,
    ) -> R {
        f(&self.caller(request).key(class))
    }
}

/// The default [`KeyExtractor`]: the [`VerifiedIdentity`] from the request extensions, or else
/// the client address.
///
/// The client address starts as the peer address of the connection (by default a
/// [`SocketAddr`] in the request extensions; for axum's `ConnectInfo<SocketAddr>` see
/// [`PeerExtractor::peer_addr_from`]). Only while that address is inside a trusted proxy
/// network is the proxies' list believed (`X-Forwarded-For` by default, or RFC 7239
/// `Forwarded`: one of them, the one your proxies append to, see [`ForwardedHeader`]), read from
/// the right: the client is the rightmost address that is not a trusted proxy. Everything left
/// of it was written by the client and is ignored, so a spoofed header from an untrusted peer,
/// or a spoofed entry behind a trusted one, changes nothing. Trust only proxies that append to
/// the chosen header. A request with no peer address at all (a misconfigured server) is charged
/// to one shared bucket (`0.0.0.0`'s network), which fails closed rather than unlimited.
#[derive(Clone)]
pub struct PeerExtractor {
    trusted: Arc<[Cidr]>,
    header: ForwardedHeader,
    peer_addr: fn(&Extensions) -> Option<SocketAddr>,
}

impl fmt::Debug for PeerExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerExtractor")
            .field("trusted", &self.trusted)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl Default for PeerExtractor {
    fn default() -> Self {
        PeerExtractor::new()
    }
}

impl PeerExtractor {
    /// No trusted proxies; the peer address from a `SocketAddr` request extension.
    pub fn new() -> Self {
        PeerExtractor {
            trusted: Arc::from([]),
            header: ForwardedHeader::XForwardedFor,
            peer_addr: |e| e.get::<SocketAddr>().copied(),
        }
    }

    /// The header the trusted proxies append to (default `X-Forwarded-For`).
    pub fn forwarded_header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// The proxy networks whose forwarded-for entries are believed.
    pub fn trust_proxies(mut self, networks: impl IntoIterator<Item = Cidr>) -> Self {
        self.trusted = networks.into_iter().collect();
        self
    }

    /// Where the connection's peer address is, e.g. for axum
    /// `|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0)`.
    pub fn peer_addr_from(mut self, f: fn(&Extensions) -> Option<SocketAddr>) -> Self {
        self.peer_addr = f;
        self
    }

    /// The client address of a request that came from `peer` with `headers` (see the type docs).
    #[inline]
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        client_ip(peer, headers, self.header, &self.trusted)
    }
}

impl PeerExtractor {
    /// The address an unauthenticated request is charged to.
    #[inline]
    fn anonymous_ip<B>(&self, request: &Request<B>) -> IpAddr {
        match (self.peer_addr)(request.extensions()) {
            Some(peer) => self.client_ip(peer.ip(), request.headers()),
            None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        }
    }
}

impl KeyExtractor for PeerExtractor {
    fn caller<B>(&self, request: &Request<B>) -> Caller {
        if let Some(id) = request.extensions().get::<VerifiedIdentity>() {
            return Caller::Verified(id.clone());
        }
        Caller::Anonymous(self.anonymous_ip(request))
    }

    #[inline]
    fn with_key<B, R>(
        &self,
        request: &Request<B>,
        class: RouteClass,
        f: impl FnOnce(&Key<'_>) -> R,
    ) -> R {
        // Borrowed from the extension, not cloned: `caller` would count two references.
        if let Some(id) = request.extensions().get::<VerifiedIdentity>() {
            let key = Key::authenticated(&id.tenant, &id.principal, class)
                .expect("VerifiedIdentity::new checked the ids");
            return f(&key);
        }
        f(&Key::anonymous(self.anonymous_ip(request), class))
    }
}
