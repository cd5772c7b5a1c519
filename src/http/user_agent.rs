//! [`SdkMatcher`]: which of the profile's `observability.sdk_versions` a request's
//! `User-Agent` names, as a bounded metric label (the listed token, `other` or `none`).
//!
//! `User-Agent` is a list of product tokens and comments (RFC 9110 section 10.1.5):
//! `myapp/2.1 (linux) tollgate-client/0.1.0`. The first product token, in the header's order,
//! that is listed exactly (`tollgate-client/0.1.0`) or by its product alone
//! (`tollgate-client`) names the label; none is `other`, no header is `none`. What a caller
//! sends cannot add a label: there are only the listed tokens and those two.
//!
//! Bounded work per request: at most the first [`MAX_SCANNED_BYTES`] of the header and its
//! first [`MAX_SCANNED_PRODUCTS`] product tokens are read, each looked up in a hash map.

use std::collections::HashMap;

use ::http::header::{HeaderMap, USER_AGENT};

use crate::profile::SdkVersions;

/// The most bytes of `User-Agent` read.
pub const MAX_SCANNED_BYTES: usize = 512;
/// The most product tokens of `User-Agent` looked up.
pub const MAX_SCANNED_PRODUCTS: usize = 16;

/// The label a request gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SdkLabel {
    /// The listed token at this place of `observability.sdk_versions`.
    Listed(usize),
    /// A `User-Agent` naming nothing listed.
    Other,
    /// No `User-Agent` header.
    None,
}

/// The profile's `observability.sdk_versions`, compiled for lookups.
#[derive(Clone, Debug)]
pub struct SdkMatcher {
    /// `product/version` and bare `product` entries, to their place in the list.
    listed: HashMap<Box<str>, usize>,
    labels: Box<[Box<str>]>,
}

impl SdkMatcher {
    /// The matcher of a profile's list; `None` when the list is empty (the layer then does
    /// not read `User-Agent` at all).
    pub fn compile(versions: &SdkVersions) -> Option<SdkMatcher> {
        if versions.is_empty() {
            return None;
        }
        let labels: Box<[Box<str>]> = versions.iter().map(|t| t.as_str().into()).collect();
        let listed = labels
            .iter()
            .enumerate()
            .map(|(i, l)| (l.clone(), i))
            .collect();
        Some(SdkMatcher { listed, labels })
    }

    /// The label values: the listed tokens in the profile's order.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.labels.iter().map(|l| &**l)
    }

    /// The label of a request with these headers (the first `User-Agent` if several).
    pub fn classify(&self, headers: &HeaderMap) -> SdkLabel {
        match headers.get(USER_AGENT) {
            None => SdkLabel::None,
            Some(v) => self.classify_value(v.as_bytes()),
        }
    }

    /// The label of one `User-Agent` value.
    pub fn classify_value(&self, value: &[u8]) -> SdkLabel {
        let value = if value.len() > MAX_SCANNED_BYTES {
            // Cut at the last space in the part read, so that no token is read cut short
            // (`tollgate-client/0.1.0` out of `tollgate-client/0.1.01`).
            let head = &value[..=MAX_SCANNED_BYTES];
            let end = head
                .iter()
                .rposition(|b| b.is_ascii_whitespace())
                .unwrap_or(0);
            &head[..end]
        } else {
            value
        };
        for product in Products::new(value).take(MAX_SCANNED_PRODUCTS) {
            // Product tokens are ASCII; anything else names nothing listed.
            let Ok(product) = core::str::from_utf8(product) else {
                continue;
            };
            if let Some(&i) = self.listed.get(product) {
                return SdkLabel::Listed(i);
            }
            if let Some((name, _)) = product.split_once('/') {
                if let Some(&i) = self.listed.get(name) {
                    return SdkLabel::Listed(i);
                }
            }
        }
        SdkLabel::Other
    }
}

/// The product tokens of a `User-Agent` value, comments (nested, with `\` escapes) skipped.
struct Products<'a> {
    rest: &'a [u8],
}

impl<'a> Products<'a> {
    fn new(value: &'a [u8]) -> Self {
        Products { rest: value }
    }
}

impl<'a> Iterator for Products<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        loop {
            let start = self.rest.iter().position(|b| !b.is_ascii_whitespace())?;
            self.rest = &self.rest[start..];
            if self.rest[0] == b'(' {
                self.rest = skip_comment(self.rest);
                continue;
            }
            let end = self
                .rest
                .iter()
                .position(|&b| b.is_ascii_whitespace() || b == b'(')
                .unwrap_or(self.rest.len());
            let (token, rest) = self.rest.split_at(end);
            self.rest = rest;
            return Some(token);
        }
    }
}

/// What follows the comment `s` starts with (all of it if it is not closed).
fn skip_comment(s: &[u8]) -> &[u8] {
    let mut depth = 0usize;
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 1,
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return &s[i + 1..];
                }
            }
            _ => {}
        }
        i += 1;
    }
    &[]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{SdkToken, SdkVersions};

    fn matcher(list: &[&str]) -> SdkMatcher {
        let tokens = list.iter().map(|t| SdkToken::new(*t).unwrap()).collect();
        SdkMatcher::compile(&SdkVersions::new(tokens).unwrap()).unwrap()
    }

    #[test]
    fn products_skip_comments() {
        let p: Vec<&[u8]> = Products::new(b"a/1 (x (y) \\) z) b/2(c) d").collect();
        assert_eq!(p, [&b"a/1"[..], b"b/2", b"d"]);
    }

    #[test]
    fn exact_then_product_then_other() {
        let m = matcher(&["tollgate-client/0.1.0", "curl"]);
        assert_eq!(
            m.classify_value(b"myapp/2 (linux) tollgate-client/0.1.0"),
            SdkLabel::Listed(0)
        );
        assert_eq!(m.classify_value(b"curl/8.5.0"), SdkLabel::Listed(1));
        assert_eq!(m.classify_value(b"tollgate-client/0.2.0"), SdkLabel::Other);
        assert_eq!(m.classify_value(b""), SdkLabel::Other);
        assert_eq!(
            m.classify_value(b"(tollgate-client/0.1.0)"),
            SdkLabel::Other
        );
        assert_eq!(m.classify(&HeaderMap::new()), SdkLabel::None);
    }

    #[test]
    fn a_token_cut_by_the_scan_limit_is_not_read() {
        let m = matcher(&["tollgate-client/0.1.0"]);
        let pad = "x".repeat(MAX_SCANNED_BYTES - 22);
        let fits = format!("{pad} tollgate-client/0.1.0");
        assert_eq!(fits.len(), MAX_SCANNED_BYTES);
        assert_eq!(m.classify_value(fits.as_bytes()), SdkLabel::Listed(0));
        let cut = format!("{pad} tollgate-client/0.1.01");
        assert_eq!(m.classify_value(cut.as_bytes()), SdkLabel::Other);
        let spaced = format!("{fits} more");
        assert_eq!(m.classify_value(spaced.as_bytes()), SdkLabel::Listed(0));
    }

    #[test]
    fn empty_list_compiles_to_nothing() {
        assert!(SdkMatcher::compile(&SdkVersions::default()).is_none());
    }
}
