//! The profile's `routes`, compiled once per profile: which route class a request belongs to,
//! found per request without parsing a glob or looking up a class name.

use std::sync::Arc;

use ::http::header::HeaderValue;
use ::http::Method;

use super::headers::interned_policy_header;
use crate::identity::RouteClass;
use crate::profile::{Profile, RouteClassLimits};

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
    limits: RouteClassLimits,
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
    /// The class's `RateLimit-Policy` value, computed once per profile (its clones copy a
    /// pointer: the text is interned).
    pub fn policy(&self) -> &HeaderValue {
        &self.policy
    }

    /// The class's two buckets, for the `t` of `RateLimit` (see
    /// [`remaining_header`](super::remaining_header)).
    pub fn limits(&self) -> &RouteClassLimits {
        &self.limits
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
                    policy: interned_policy_header(limits),
                    limits: *limits,
                })
            })
            .collect();
        RouteTable { entries }
    }

    /// The first route that matches, or `None` (the request is not limited).
    pub fn classify(&self, method: &Method, path: &str) -> Option<&RouteEntry> {
        self.position(method, path).map(|i| &self.entries[i])
    }

    /// The index of the first route that matches: a future that owns the table (through an
    /// `Arc`) keeps the index rather than a borrow.
    pub(crate) fn position(&self, method: &Method, path: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.matches(method, path))
    }

    /// The entry at `index`, from [`RouteTable::position`] on this same table.
    pub(crate) fn entry(&self, index: usize) -> &RouteEntry {
        &self.entries[index]
    }
}
