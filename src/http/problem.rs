//! The RFC 9457 body of a refusal: stable, machine-readable, and about the caller alone.

use serde::Serialize;

use super::headers::bucket_policy;
use super::request_id::RequestId;
use crate::decision::{CatalogEntry, Cause, Decision};
use crate::profile::Profile;

/// The RFC 9457 media type of refusal bodies.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem body for a refusal, with the tollgate extension members `code`,
/// `request_id` and `retry_after`. Serialize it with `serde_json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem<'a> {
    /// The catalog entry's problem type URI.
    #[serde(rename = "type")]
    pub type_uri: &'a str,
    /// A short, fixed summary of the problem type.
    pub title: &'static str,
    /// The HTTP status, repeated as RFC 9457 recommends.
    pub status: u16,
    /// A fixed sentence about this occurrence; it names nothing but the caller's own situation.
    pub detail: String,
    /// The catalog's stable, machine-readable code.
    pub code: &'a str,
    /// The request id, also sent as `X-Request-Id`.
    pub request_id: &'a str,
    /// Seconds to wait, exactly as in `Retry-After`; absent when that header is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// The caller's own policy that is exhausted (the draft's `quota-exceeded` member), 429 only.
    #[serde(rename = "violated-policies", skip_serializing_if = "Option::is_none")]
    pub violated_policies: Option<[&'static str; 1]>,
}

impl<'a> Problem<'a> {
    /// The body refusing `decision` under `profile`, with `retry_after` as `Retry-After` says it;
    /// `None` for [`Decision::Admit`]. Callers go through [`Answer::problem`](super::Answer::problem),
    /// which computes `retry_after` the one way the header does.
    pub(crate) fn refusing(
        decision: Decision,
        profile: &'a Profile,
        request_id: &'a RequestId,
        retry_after: Option<u64>,
    ) -> Option<Problem<'a>> {
        let entry = decision.catalog_entry()?;
        let catalog = profile.catalog.entry(entry);
        let (title, status) = match entry {
            CatalogEntry::Throttled => ("Too Many Requests", 429),
            CatalogEntry::CostExceeds => ("Request Cost Exceeds Limit", 429),
            CatalogEntry::OverCapacity | CatalogEntry::LimiterUnavailable => {
                ("Service Unavailable", 503)
            }
        };
        let later = match retry_after {
            Some(1) => "retry after 1 second".to_owned(),
            Some(s) => format!("retry after {s} seconds"),
            None => "retry later".to_owned(),
        };
        let (detail, violated) = match decision {
            Decision::Throttle { bucket, .. } => {
                let name = bucket_policy(bucket);
                (
                    format!("You have used your {name} quota for this route; {later}."),
                    Some([name]),
                )
            }
            // The caller's own class limits are public (the discovery document): naming the
            // bucket tells nothing of anyone else.
            Decision::Exceeds { bucket } => {
                let name = bucket_policy(bucket);
                (
                    format!(
                        "This request's cost is more than your {name} quota for this route can \
                         hold when full; it will not be admitted at this cost, so do not retry it."
                    ),
                    Some([name]),
                )
            }
            Decision::Unavailable {
                cause: Cause::StoreUnavailable,
                ..
            } => (
                format!("Rate limiting is temporarily unavailable; {later}."),
                None,
            ),
            // Shard full, tenant share and table full read the same: which of them, and how
            // full anything is, is not the caller's business.
            _ => (format!("The service is at capacity; {later}."), None),
        };
        Some(Problem {
            type_uri: catalog.type_uri.as_str(),
            title,
            status,
            detail,
            code: catalog.code.as_str(),
            request_id: request_id.as_str(),
            retry_after,
            violated_policies: violated,
        })
    }
}
