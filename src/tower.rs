//! [`RateLimitLayer`]: per-request admission for axum, tonic and any tower stack.
//!
//! For every request the layer
//! 1. finds the route class from the profile's `routes` (method and path glob, first match
//!    wins; the globs are compiled once per profile, not per request). A request that matches
//!    no route is **passed through unlimited and untouched**: the profile decides what is
//!    limited, and a route left out of it (health checks, the discovery document) stays free;
//! 2. takes the request id from a well-formed `X-Request-Id`, or generates one, and puts it back
//!    on the request so that handlers log the same id;
//! 3. asks a [`KeyExtractor`] who is calling: the [`VerifiedIdentity`] that the service's own
//!    authentication layer put in the request extensions, or else the peer address (believing
//!    `Forwarded` / `X-Forwarded-For` only from trusted proxy networks);
//! 4. asks the [`Admission`] backend (a [`Limiter`](crate::Limiter), or the Redis limiter) for a decision,
//!    and answers a refusal itself with [`crate::http::Answer::refusal`], or calls the inner
//!    service and adds `RateLimit-Policy` (and, when opted in, `RateLimit`) to its response.
//!
//! `poll_ready` only delegates to the inner service: the limit is enforced per request, never
//! by withholding readiness, so one caller's refusals never stall another's requests.
//!
//! A route class in shadow mode (`mode: shadow` on the class or the profile) lets a refused
//! request through: the backend says so in its [`Verdict`](crate::Verdict), and the refusal that would have
//! been made is still reported in [`RateLimitOutcome`].
//!
//! ```
//! use std::sync::Arc;
//! use tollgate::tower::{PeerExtractor, RateLimitLayer};
//! use tollgate::{Limiter, Profile};
//!
//! let limiter = Arc::new(Limiter::builder(Profile::from_path("examples/profiles/example.yaml")?).build()?);
//! let extractor = PeerExtractor::new().trust_proxies(["10.0.0.0/8".parse()?]);
//! let layer = RateLimitLayer::with_extractor(Arc::clone(&limiter), extractor);
//! // axum: Router::new().route(..).layer(layer).layer(your_authentication_layer)
//! # let _ = layer;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::str::FromStr;
use core::task::{Context, Poll};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use ::http::header::{HeaderMap, HeaderName, HeaderValue};
use ::http::{Extensions, Method, Request, Response};
use ::tower::{Layer, Service};
use parking_lot::RwLock;

use crate::decision::Decision;
use crate::http::{policy_header, Answer, RequestId, X_REQUEST_ID};
use crate::identity::{Key, KeyError, RouteClass};
use crate::profile::Profile;

// ---------------------------------------------------------------------------------------------
// The backend.

pub use crate::admission::Admission;

// ---------------------------------------------------------------------------------------------
// Who is calling.

/// The caller as the service's own authentication verified it. The authentication layer
/// inserts it into the request extensions; the layer then keys the request by tenant and
/// principal, never by address.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct VerifiedIdentity {
    tenant: Arc<str>,
    principal: Arc<str>,
}

impl VerifiedIdentity {
    /// Checks the ids as [`Key::authenticated`] does (1 to [`MAX_ID_LEN`](crate::MAX_ID_LEN) bytes each), so that
    /// an identity in the extensions always makes a key.
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
}

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

fn mask32(bits: u32, len: u8) -> u32 {
    bits & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask128(bits: u128, len: u8) -> u128 {
    bits & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
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

const FORWARDED: HeaderName = HeaderName::from_static("forwarded");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

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

    fn trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|n| n.contains(ip))
    }

    /// The client address of a request that came from `peer` with `headers` (see the type docs).
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = canonical(peer);
        if !self.trusted(client) {
            return client;
        }
        let (name, parse): (HeaderName, fn(&str) -> Option<IpAddr>) = match self.header {
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
                        if !self.trusted(client) {
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

impl KeyExtractor for PeerExtractor {
    fn caller<B>(&self, request: &Request<B>) -> Caller {
        if let Some(id) = request.extensions().get::<VerifiedIdentity>() {
            return Caller::Verified(id.clone());
        }
        let ip = match (self.peer_addr)(request.extensions()) {
            Some(peer) => self.client_ip(peer.ip(), request.headers()),
            None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        };
        Caller::Anonymous(ip)
    }
}

// ---------------------------------------------------------------------------------------------
// Routes.

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(Box<str>),
    /// `*`: exactly one segment.
    One,
    /// `**`: the rest of the path, zero or more segments.
    Rest,
}

/// One compiled entry of the profile's `routes`.
#[derive(Clone, Debug)]
pub struct RouteEntry {
    method: Option<Method>,
    segments: Box<[Segment]>,
    class: RouteClass,
    class_name: Arc<str>,
    policy: HeaderValue,
}

impl RouteEntry {
    /// The route class handle.
    pub fn class(&self) -> RouteClass {
        self.class
    }
    /// The route class name.
    pub fn class_name(&self) -> &str {
        &self.class_name
    }
    /// The class's `RateLimit-Policy` value, computed once.
    pub fn policy(&self) -> &HeaderValue {
        &self.policy
    }

    fn matches(&self, method: &Method, path: &str) -> bool {
        if self.method.as_ref().is_some_and(|m| m != method) {
            return false;
        }
        let mut parts = path.strip_prefix('/').unwrap_or(path).split('/');
        for segment in self.segments.iter() {
            match segment {
                Segment::Rest => return true,
                Segment::One => {
                    if parts.next().is_none() {
                        return false;
                    }
                }
                Segment::Literal(l) => {
                    if parts.next() != Some(&**l) {
                        return false;
                    }
                }
            }
        }
        parts.next().is_none()
    }
}

/// The profile's `routes`, compiled: method and path glob to route class, first match wins.
///
/// In a glob, a segment `*` matches exactly one path segment and `**` matches the rest of the
/// path (zero or more segments; anything written after it is never reached); every other
/// segment matches itself literally. The query string is not part of the path.
#[derive(Clone, Debug)]
pub struct RouteTable {
    entries: Box<[RouteEntry]>,
}

impl RouteTable {
    /// Compiles the routes of `profile`, resolving class names with `resolve` (e.g.
    /// `|n| limiter.route_class(n)`). A route whose class does not resolve is left out
    /// (a validated profile has none).
    pub fn compile(profile: &Profile, resolve: impl Fn(&str) -> Option<RouteClass>) -> RouteTable {
        let entries = profile
            .routes
            .iter()
            .filter_map(|r| {
                let limits = profile.route_class(&r.class)?;
                let class = resolve(&r.class)?;
                let method = match r.method.as_str() {
                    "*" => None,
                    m => Some(Method::from_bytes(m.as_bytes()).ok()?),
                };
                let path = r.path.strip_prefix('/').unwrap_or(&r.path);
                let segments = path
                    .split('/')
                    .map(|s| match s {
                        "*" => Segment::One,
                        "**" => Segment::Rest,
                        lit => Segment::Literal(lit.into()),
                    })
                    .collect();
                Some(RouteEntry {
                    method,
                    segments,
                    class,
                    class_name: r.class.as_str().into(),
                    policy: policy_header(limits),
                })
            })
            .collect();
        RouteTable { entries }
    }

    /// The first route that matches, or `None` (the request is not limited).
    pub fn classify(&self, method: &Method, path: &str) -> Option<&RouteEntry> {
        self.position(method, path).map(|i| &self.entries[i])
    }

    fn position(&self, method: &Method, path: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.matches(method, path))
    }
}

// ---------------------------------------------------------------------------------------------
// The layer.

/// What the layer decided for one request, in the request extensions (for handlers, e.g. to
/// combine with their own limiter through [`crate::http::Combined`]) and in the response
/// extensions (for telemetry). The decision is what the profile computed, also when shadow
/// mode let the request through.
#[derive(Clone, Debug)]
pub struct RateLimitOutcome {
    /// What the profile computed (a refusal here with `enforced: false` was shadowed).
    pub decision: Decision,
    /// The route class handle.
    pub class: RouteClass,
    /// The route class name.
    pub class_name: Arc<str>,
    /// False when a refusal was let through by shadow mode.
    pub enforced: bool,
    /// The request id sent back to the caller.
    pub request_id: RequestId,
}

struct Compiled {
    profile: Arc<Profile>,
    routes: RouteTable,
}

struct Shared<A, X> {
    admission: A,
    extractor: X,
    compiled: RwLock<Arc<Compiled>>,
}

impl<A: Admission, X> Shared<A, X> {
    fn compile(admission: &A, profile: Arc<Profile>) -> Arc<Compiled> {
        let routes = RouteTable::compile(&profile, |n| admission.route_class(n));
        Arc::new(Compiled { profile, routes })
    }

    /// The compiled routes of the profile in force, recompiled only after a reload.
    fn compiled(&self) -> Arc<Compiled> {
        let profile = self.admission.profile();
        let current = self.compiled.read().clone();
        if Arc::ptr_eq(&current.profile, &profile) {
            return current;
        }
        self.recompile(profile)
    }

    #[cold]
    fn recompile(&self, profile: Arc<Profile>) -> Arc<Compiled> {
        let fresh = Self::compile(&self.admission, profile);
        *self.compiled.write() = Arc::clone(&fresh);
        fresh
    }
}

/// Rate-limits a tower service; see the [module docs](self). `Clone` and cheap to clone: every
/// clone shares the backend and the compiled routes.
pub struct RateLimitLayer<A, X = PeerExtractor> {
    shared: Arc<Shared<A, X>>,
}

impl<A, X> Clone for RateLimitLayer<A, X> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<A, X> fmt::Debug for RateLimitLayer<A, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer").finish_non_exhaustive()
    }
}

impl<A: Admission> RateLimitLayer<A, PeerExtractor> {
    /// A layer over `admission` with the default [`PeerExtractor`] (no trusted proxies, peer
    /// address from a `SocketAddr` request extension).
    pub fn new(admission: A) -> Self {
        RateLimitLayer::with_extractor(admission, PeerExtractor::new())
    }
}

impl<A: Admission, X: KeyExtractor> RateLimitLayer<A, X> {
    /// A layer over `admission` that finds callers with `extractor`.
    pub fn with_extractor(admission: A, extractor: X) -> Self {
        let compiled = Shared::<A, X>::compile(&admission, admission.profile());
        RateLimitLayer {
            shared: Arc::new(Shared {
                admission,
                extractor,
                compiled: RwLock::new(compiled),
            }),
        }
    }

    /// The backend.
    pub fn admission(&self) -> &A {
        &self.shared.admission
    }
}

impl<S, A, X> Layer<S> for RateLimitLayer<A, X> {
    type Service = RateLimit<S, A, X>;
    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around `S`.
pub struct RateLimit<S, A, X = PeerExtractor> {
    inner: S,
    shared: Arc<Shared<A, X>>,
}

impl<S: Clone, A, X> Clone for RateLimit<S, A, X> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, A, X> fmt::Debug for RateLimit<S, A, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// The response future of [`RateLimit`].
pub type ResponseFuture<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, A, X, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, A, X>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    A: Admission,
    X: KeyExtractor,
    ReqBody: Send + 'static,
    ResBody: From<Vec<u8>> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<Response<ResBody>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        // The clone that was made ready is the one to call; the fresh clone stays for next time.
        let clone = self.inner.clone();
        let mut inner = core::mem::replace(&mut self.inner, clone);
        let compiled = self.shared.compiled();
        let Some(route) = compiled
            .routes
            .position(request.method(), request.uri().path())
        else {
            return Box::pin(inner.call(request));
        };
        let request_id = RequestId::from_headers(request.headers());
        request
            .headers_mut()
            .insert(X_REQUEST_ID, request_id.header_value().clone());
        let caller = self.shared.extractor.caller(&request);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let entry = &compiled.routes.entries[route];
            let profile = &*compiled.profile;
            let key = caller.key(entry.class);
            let verdict = shared.admission.evaluate(&key).await;
            let remaining = if profile.expose_remaining {
                shared.admission.remaining(&key).await
            } else {
                None
            };
            let outcome = RateLimitOutcome {
                decision: verdict.computed,
                class: entry.class,
                class_name: Arc::clone(&entry.class_name),
                enforced: !verdict.is_shadowed(),
                request_id: request_id.clone(),
            };
            let answer = Answer::new(verdict.decision, profile, &request_id)
                .with_policy(&entry.policy)
                .with_remaining(remaining);
            if let Some(mut refusal) = answer.refusal::<ResBody>() {
                refusal.extensions_mut().insert(outcome);
                return Ok(refusal);
            }
            request.extensions_mut().insert(outcome.clone());
            let mut response = inner.call(request).await?;
            answer.write_headers(response.headers_mut());
            response.extensions_mut().insert(outcome);
            Ok(response)
        })
    }
}
