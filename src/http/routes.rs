//! The profile's `routes`, compiled once per profile: which route class a request belongs to,
//! found per request without parsing a glob or looking up a class name.

use std::sync::Arc;

use ::http::header::HeaderValue;
use ::http::Method;

use super::headers::{interned_policy, Policy};
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

/// A glob without `*` before its end, compiled to one comparison: most routes are
/// `/v1/items` or `/v1/**`, and the segment walk costs several times one comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Shape {
    /// Literal segments only: the path (leading `/` dropped) is their text joined by `/`.
    Exact(Box<str>),
    /// At least one literal segment and then `**`: the path is their text, or that text
    /// followed by a `/` and anything.
    Prefix(Box<str>),
    /// `**` first: every path.
    Any,
    /// A `*` among the segments: the walk.
    Walk,
}

impl Shape {
    /// The shape of `segments`, equivalent to walking them (`RouteEntry::walk`): literal
    /// segments never hold a `/`, so comparing each literal and its boundary in turn is
    /// comparing their joined text; a `**` matches whatever follows.
    fn of(segments: &[Segment]) -> Shape {
        let mut text = String::new();
        for (i, segment) in segments.iter().enumerate() {
            match segment {
                Segment::Literal(l) => {
                    if i > 0 {
                        text.push('/');
                    }
                    text.push_str(l);
                }
                Segment::Rest if i == 0 => return Shape::Any,
                Segment::Rest => return Shape::Prefix(text.into()),
                Segment::One => return Shape::Walk,
            }
        }
        Shape::Exact(text.into())
    }
}

/// One compiled entry of the profile's `routes`.
#[derive(Clone, Debug)]
pub struct RouteEntry {
    method: Option<Method>,
    segments: Box<[Segment]>,
    shape: Shape,
    class: RouteClass,
    class_name: Arc<str>,
    policy: &'static Policy,
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
        &self.policy.header
    }

    /// [`RouteEntry::policy`], for a response future that outlives the table.
    #[cfg(feature = "tower")]
    pub(crate) fn interned_policy(&self) -> &'static Policy {
        self.policy
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
        let rest = path.strip_prefix('/').unwrap_or(path);
        match &self.shape {
            Shape::Exact(text) => rest == &**text,
            Shape::Prefix(text) => rest
                .strip_prefix(&**text)
                .is_some_and(|after| after.is_empty() || after.starts_with('/')),
            Shape::Any => true,
            Shape::Walk => self.walk(path),
        }
    }

    /// The segment walk, for a glob with a `*`.
    fn walk(&self, path: &str) -> bool {
        // What is left of the path after the segments matched so far, as `str::split('/')`
        // would still yield it (`None`: no segment left), walked without a splitting iterator:
        // a literal is compared in place, and only `*` searches for the next `/`.
        let mut rest = Some(path.strip_prefix('/').unwrap_or(path));
        for segment in self.segments.iter() {
            // `**` matches the rest, also when nothing is left (`/v1/**` matches `/v1`).
            if let Segment::Rest = segment {
                return true;
            }
            let Some(r) = rest else {
                return false;
            };
            match segment {
                Segment::Rest => return true,
                Segment::One => rest = r.find('/').map(|i| &r[i + 1..]),
                Segment::Literal(l) => {
                    let Some(after) = r.strip_prefix(&**l) else {
                        return false;
                    };
                    rest = match after.as_bytes().first() {
                        None => None,
                        Some(b'/') => Some(&after[1..]),
                        Some(_) => return false,
                    };
                }
            }
        }
        rest.is_none()
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
                let segments: Box<[Segment]> = path
                    .split('/')
                    .map(|s| match s {
                        "*" => Segment::One,
                        "**" => Segment::Rest,
                        lit => Segment::Literal(lit.into()),
                    })
                    .collect();
                Some(RouteEntry {
                    method,
                    shape: Shape::of(&segments),
                    segments,
                    class,
                    class_name: r.class.as_str().into(),
                    policy: interned_policy(limits),
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
    #[inline]
    pub(crate) fn position(&self, method: &Method, path: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.matches(method, path))
    }

    /// The entry at `index`, from [`RouteTable::position`] on this same table.
    #[cfg(feature = "tower")]
    pub(crate) fn entry(&self, index: usize) -> &RouteEntry {
        &self.entries[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The matcher as first written, on `str::split`: the reference the in-place walk must
    /// agree with.
    fn reference(segments: &[Segment], path: &str) -> bool {
        let mut parts = path.strip_prefix('/').unwrap_or(path).split('/');
        for segment in segments {
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

    #[test]
    fn the_in_place_walk_agrees_with_splitting() {
        let globs = [
            "/v1/**",
            "/v1",
            "/v1/*",
            "/v1/*/run",
            "/*",
            "/**",
            "/",
            "/v1/",
            "/v1/*/",
            "/a/b/c",
            "/*/*",
            "/v1/**/x",
            "//**",
            "//",
            "/v1//**",
            "**",
            "v1/**",
        ];
        let paths = [
            "",
            "/",
            "//",
            "/v1",
            "/v1/",
            "/v1//",
            "/v1/items",
            "/v1/items/",
            "/v1/a/run",
            "/v1/a/b/run",
            "/v10",
            "/v1x/a",
            "/a/b/c",
            "/a/b/c/",
            "/a/b",
            "v1/items",
            "/v1/run",
            "/x/y",
            "//x",
            "/v1//x",
            "v1",
            "/v1/items/**",
        ];
        for glob in globs {
            let segments: Box<[Segment]> = glob
                .strip_prefix('/')
                .unwrap_or(glob)
                .split('/')
                .map(|s| match s {
                    "*" => Segment::One,
                    "**" => Segment::Rest,
                    lit => Segment::Literal(lit.into()),
                })
                .collect();
            let limits = crate::profile::Profile::from_yaml(
                "name: t\nidentities: { capacity: 8 }\nroute_classes:\n  c:\n    \
                 burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 1, per: 1s }\n",
            )
            .unwrap()
            .route_class("c")
            .copied()
            .unwrap();
            let entry = RouteEntry {
                method: None,
                shape: Shape::of(&segments),
                segments: segments.clone(),
                class: RouteClass(0),
                class_name: "c".into(),
                policy: interned_policy(&limits),
                limits,
            };
            for path in paths {
                assert_eq!(
                    entry.matches(&Method::GET, path),
                    reference(&segments, path),
                    "glob {glob:?} path {path:?}"
                );
                assert_eq!(
                    entry.walk(path),
                    reference(&segments, path),
                    "walk: glob {glob:?} path {path:?}"
                );
            }
        }
    }
}
