//! The JSON form of `RateLimitRequest` and `RateLimitResponse` that `POST /json` speaks, as
//! envoyproxy/ratelimit serves it: the proto3 JSON mapping (lowerCamelCase names, the proto's
//! own names accepted too; enums as their names; 64-bit integers as strings or numbers;
//! durations as `"1.500s"`; bytes as base64).

use base64::Engine as _;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde::{Deserialize, Deserializer, Serialize};

/// `RateLimitRequest` as JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(
        default,
        alias = "hits_addend",
        rename = "hitsAddend",
        deserialize_with = "uint"
    )]
    hits_addend: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(
        default,
        alias = "hits_addend",
        rename = "hitsAddend",
        deserialize_with = "uint"
    )]
    hits_addend: Option<u64>,
    #[serde(default, alias = "is_negative_hits", rename = "isNegativeHits")]
    is_negative_hits: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
}

/// A proto3 JSON integer: a number or a decimal string.
fn uint<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum N {
        Num(u64),
        Text(String),
    }
    match Option::<N>::deserialize(d)? {
        None => Ok(None),
        Some(N::Num(n)) => Ok(Some(n)),
        Some(N::Text(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom("expected a non-negative integer")),
    }
}

impl JsonRequest {
    /// The protobuf request; `None` if the request-level `hitsAddend` is above 2^32 - 1.
    pub fn into_proto(self) -> Option<RateLimitRequest> {
        Some(RateLimitRequest {
            domain: self.domain,
            hits_addend: u32::try_from(self.hits_addend.unwrap_or(0)).ok()?,
            descriptors: self
                .descriptors
                .into_iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .entries
                        .into_iter()
                        .map(|e| Entry {
                            key: e.key,
                            value: e.value,
                        })
                        .collect(),
                    limit: None,
                    hits_addend: d.hits_addend.map(|value| UInt64Value { value }),
                    is_negative_hits: d.is_negative_hits,
                })
                .collect(),
        })
    }
}

/// `RateLimitResponse` as JSON; zero values are left out, as proto3 JSON does.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JsonResponse {
    overall_code: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    statuses: Vec<JsonStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    response_headers_to_add: Vec<JsonHeader>,
    #[serde(skip_serializing_if = "String::is_empty")]
    raw_body: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonStatus {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit>,
    #[serde(skip_serializing_if = "is_zero")]
    limit_remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonLimit {
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    requests_per_unit: u32,
    unit: &'static str,
}

#[derive(Debug, Serialize)]
struct JsonHeader {
    key: String,
    value: String,
}

fn code_name(code: i32) -> &'static str {
    Code::try_from(code).unwrap_or(Code::Unknown).as_str_name()
}

fn status(s: &DescriptorStatus) -> JsonStatus {
    JsonStatus {
        code: code_name(s.code),
        current_limit: s.current_limit.as_ref().map(|l| JsonLimit {
            name: l.name.clone(),
            requests_per_unit: l.requests_per_unit,
            unit: Unit::try_from(l.unit)
                .unwrap_or(Unit::Unknown)
                .as_str_name(),
        }),
        limit_remaining: s.limit_remaining,
        duration_until_reset: s.duration_until_reset.map(|d| {
            // proto3 JSON: seconds with 0, 3, 6 or 9 fractional digits, and an `s`.
            match d.nanos {
                0 => format!("{}s", d.seconds),
                n if n % 1_000_000 == 0 => format!("{}.{:03}s", d.seconds, n / 1_000_000),
                n if n % 1_000 == 0 => format!("{}.{:06}s", d.seconds, n / 1_000),
                n => format!("{}.{n:09}s", d.seconds),
            }
        }),
    }
}

impl From<&RateLimitResponse> for JsonResponse {
    fn from(r: &RateLimitResponse) -> JsonResponse {
        JsonResponse {
            overall_code: code_name(r.overall_code),
            statuses: r.statuses.iter().map(status).collect(),
            response_headers_to_add: r
                .response_headers_to_add
                .iter()
                .map(|h| JsonHeader {
                    key: h.key.clone(),
                    value: h.value.clone(),
                })
                .collect(),
            raw_body: base64::engine::general_purpose::STANDARD.encode(&r.raw_body),
        }
    }
}
