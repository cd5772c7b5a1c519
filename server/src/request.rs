//! What a well-formed `RateLimitRequest` is, checked before anything is charged: the bounds
//! below, and the weighted cost of each descriptor (`hits_addend`).
//!
//! Envoy sends a handful of descriptors of a few entries each; the bounds are far above that
//! and keep one request's work small (a request at the bounds is 64 x 32 entries of at most
//! 1 KiB each).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::MAX_ID_LEN;

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 64;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 32;
/// The longest entry key, in bytes.
pub const MAX_KEY_LEN: usize = 256;
/// The longest entry value, in bytes (a tenant or principal id is at most this long).
pub const MAX_VALUE_LEN: usize = MAX_ID_LEN;
/// The longest domain, in bytes.
pub const MAX_DOMAIN_LEN: usize = 256;

/// Why a request is malformed: sent back as `INVALID_ARGUMENT`. It names positions and entry
/// keys, never an entry's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

/// Checks the request's shape and returns each descriptor's cost: its own `hits_addend` where
/// set (0 checks without charging), else the request's (0, Envoy's "unset", is 1).
pub fn costs(req: &RateLimitRequest) -> Result<Vec<u32>, Malformed> {
    let bad = |m: String| Err(Malformed(m));
    if req.domain.is_empty() {
        return bad("domain is empty".into());
    }
    if req.domain.len() > MAX_DOMAIN_LEN {
        return bad(format!(
            "domain is {} bytes, more than the {MAX_DOMAIN_LEN} allowed",
            req.domain.len()
        ));
    }
    if req.descriptors.is_empty() {
        return bad("no descriptors".into());
    }
    if req.descriptors.len() > MAX_DESCRIPTORS {
        return bad(format!(
            "{} descriptors, more than the {MAX_DESCRIPTORS} allowed",
            req.descriptors.len()
        ));
    }
    let request_cost = req.hits_addend.max(1);
    req.descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| {
            check_descriptor(i, d)?;
            match &d.hits_addend {
                None => Ok(request_cost),
                Some(h) => u32::try_from(h.value).map_err(|_| {
                    Malformed(format!(
                        "descriptors[{i}].hits_addend {} is more than {}",
                        h.value,
                        u32::MAX
                    ))
                }),
            }
        })
        .collect()
}

fn check_descriptor(i: usize, d: &RateLimitDescriptor) -> Result<(), Malformed> {
    let bad = |m: String| Err(Malformed(m));
    if d.entries.is_empty() {
        return bad(format!("descriptors[{i}] has no entries"));
    }
    if d.entries.len() > MAX_ENTRIES {
        return bad(format!(
            "descriptors[{i}] has {} entries, more than the {MAX_ENTRIES} allowed",
            d.entries.len()
        ));
    }
    if d.is_negative_hits {
        return bad(format!(
            "descriptors[{i}].is_negative_hits is not supported: tollgate gives tokens back only \
             for requests it refused"
        ));
    }
    for (j, e) in d.entries.iter().enumerate() {
        if e.key.is_empty() {
            return bad(format!("descriptors[{i}].entries[{j}].key is empty"));
        }
        if e.key.len() > MAX_KEY_LEN {
            return bad(format!(
                "descriptors[{i}].entries[{j}].key is {} bytes, more than the {MAX_KEY_LEN} allowed",
                e.key.len()
            ));
        }
        if e.value.len() > MAX_VALUE_LEN {
            return bad(format!(
                "descriptors[{i}].entries[{j}] ({:?}): the value is {} bytes, more than the \
                 {MAX_VALUE_LEN} allowed",
                printable(&e.key),
                e.value.len()
            ));
        }
    }
    Ok(())
}

/// A key as it may appear in a message: control characters escaped by `{:?}`, and at most 64
/// bytes of it.
fn printable(key: &str) -> &str {
    let mut end = key.len().min(64);
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}
