//! The model of the `rls_request` check: the request bounds and the profile's four rules,
//! written from the guide (`docs/guide/envoy.md`), not from the server's code, so that the check
//! compares two readings of the contract.

use tollgate::{Key, RouteClass};
use tollgate_server::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_server::request::{
    MAX_DESCRIPTORS, MAX_DOMAIN_LEN, MAX_ENTRIES, MAX_KEY_LEN, MAX_VALUE_LEN,
};

use super::*;

/// The model's reading of the request bounds (the guide, `docs/guide/envoy.md`; `server/src/request.rs`
/// documents them): is it well formed, and each descriptor's cost.
pub(super) fn model_costs(req: &RateLimitRequest) -> Option<Vec<u32>> {
    let ok = !req.domain.is_empty()
        && req.domain.len() <= MAX_DOMAIN_LEN
        && (1..=MAX_DESCRIPTORS).contains(&req.descriptors.len())
        && req.descriptors.iter().all(|d| {
            (1..=MAX_ENTRIES).contains(&d.entries.len())
                && !d.is_negative_hits
                && d.hits_addend.is_none_or(|h| h.value <= u64::from(u32::MAX))
                && d.entries.iter().all(|e| {
                    (1..=MAX_KEY_LEN).contains(&e.key.len()) && e.value.len() <= MAX_VALUE_LEN
                })
        });
    ok.then(|| {
        req.descriptors
            .iter()
            .map(|d| match &d.hits_addend {
                Some(h) => h.value as u32,
                None => req.hits_addend.max(1),
            })
            .collect()
    })
}

/// The value of the first entry named `key`.
pub(super) fn first<'a>(entries: &'a [Entry], key: &str) -> Option<&'a str> {
    entries
        .iter()
        .find(|e| e.key == key)
        .map(|e| e.value.as_str())
}

/// What one descriptor maps to under the four rules: `Err` malformed (an empty id, an address
/// that is none), `Ok(None)` unmatched.
#[allow(clippy::result_unit_err)]
pub(super) fn model_map<'a>(
    entries: &'a [Entry],
    classes: [RouteClass; 2],
) -> Result<Option<Key<'a>>, ()> {
    let (t, u) = (first(entries, "tenant"), first(entries, "user"));
    let who = |class: RouteClass| match (t, u) {
        (Some(t), Some(u)) if t.is_empty() || u.is_empty() => Some(Err(())),
        (Some(t), Some(u)) => Some(Ok(Key::authenticated(t, u, class).unwrap())),
        _ => None,
    };
    if first(entries, "generic_key") == Some("reports") {
        if let Some(k) = who(classes[1]) {
            return k.map(Some);
        }
    }
    let named = match first(entries, "class") {
        Some("read") => Some(classes[0]),
        Some("write") => Some(classes[1]),
        _ => None,
    };
    if let Some(c) = named {
        if let Some(k) = who(c) {
            return k.map(Some);
        }
    }
    if let Some(k) = who(classes[0]) {
        return k.map(Some);
    }
    match first(entries, "remote_address") {
        Some(a) => a
            .parse::<IpAddr>()
            .map(|ip| Some(Key::anonymous(ip, classes[0])))
            .map_err(|_| ()),
        None => Ok(None),
    }
}

/// What the model expects of a well-formed request for the served domain.
pub(super) enum Plan<'a> {
    /// `INVALID_ARGUMENT`.
    Invalid,
    /// `PERMISSION_DENIED`: a descriptor no rule matches, and the profile refuses those.
    Denied,
    /// Decided: the items charged, and for each descriptor its item (`None`: not limited).
    Decide {
        items: Vec<(Key<'a>, u32)>,
        at: Vec<Option<usize>>,
    },
}

pub(super) fn plan<'a>(
    req: &'a RateLimitRequest,
    costs: &[u32],
    classes: [RouteClass; 2],
    refuse_unmatched: bool,
) -> Plan<'a> {
    let mut items = Vec::new();
    let mut at = Vec::new();
    for (d, cost) in req.descriptors.iter().zip(costs) {
        match model_map(&d.entries, classes) {
            Err(()) => return Plan::Invalid,
            Ok(None) if refuse_unmatched => return Plan::Denied,
            Ok(None) => at.push(None),
            Ok(Some(key)) => {
                at.push(Some(items.len()));
                items.push((key, *cost));
            }
        }
    }
    Plan::Decide { items, at }
}
