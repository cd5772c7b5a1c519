//! The input's decoding: the byte reader, the tables its choices index, and a request built
//! from them (the layout is in the module doc of `rls_request`).

use tollgate_server::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_server::envoy_types::pb::google::protobuf::UInt64Value;
use tollgate_server::request::{MAX_DOMAIN_LEN, MAX_KEY_LEN, MAX_VALUE_LEN};

use super::{DOMAIN, IDENTITIES};
use crate::fuzz::bytes::Bytes;

/// A marker in the tables: read a length byte and that many input bytes.
pub(super) const RAW: &str = "\u{0}raw";

/// Entry keys: the profile's, near misses, empty, raw, at the bound and above.
pub(super) fn keys() -> [String; 16] {
    [
        "tenant",
        "user",
        "class",
        "remote_address",
        "generic_key",
        "x-request-id",
        "tenant",
        "user",
        "class",
        "remote_address",
        "other",
        "",
        RAW,
        "Tenant",
        "", // replaced below: a key at the bound
        "", // replaced below: a key one byte above it
    ]
    .map(str::to_owned)
    .into_iter()
    .enumerate()
    .map(|(i, k)| match i {
        14 => "k".repeat(MAX_KEY_LEN),
        15 => "k".repeat(MAX_KEY_LEN + 1),
        _ => k,
    })
    .collect::<Vec<_>>()
    .try_into()
    .unwrap()
}

/// Entry values: identities, classes, near misses, empty, raw, at the bound and above.
pub(super) fn values() -> [String; 16] {
    let mut v = [
        IDENTITIES[0],
        IDENTITIES[1],
        IDENTITIES[2],
        IDENTITIES[3],
        "read",
        "write",
        "reports",
        IDENTITIES[4],
        IDENTITIES[5],
        IDENTITIES[6],
        "not-an-ip",
        "",
        RAW,
        "nope",
        "",
        "",
    ]
    .map(str::to_owned);
    v[14] = "v".repeat(MAX_VALUE_LEN);
    v[15] = "v".repeat(MAX_VALUE_LEN + 1);
    v
}

/// Request `hits_addend` choices.
const REQUEST_HITS: [u32; 8] = [0, 1, 2, 3, 5, 1_000, u32::MAX - 1, u32::MAX];
/// Descriptor `hits_addend` choices (bits 0-3: 0-7 unset, 8-14 these, 15 `is_negative_hits`).
const DESCRIPTOR_HITS: [u64; 7] = [0, 1, 2, 3, u32::MAX as u64, u32::MAX as u64 + 1, u64::MAX];
/// Descriptor counts: small ones mostly, `admit_all`'s inline bound (8) and above, the
/// request bound and above, and none.
const DESCRIPTORS: [usize; 16] = [1, 1, 2, 2, 3, 3, 4, 0, 8, 9, 5, 6, 64, 65, 1, 2];
/// Entry counts per descriptor.
const ENTRIES: [usize; 16] = [0, 1, 2, 2, 3, 3, 3, 4, 4, 5, 6, 1, 2, 3, 32, 33];
/// Domains: a `RAW` one, empty, at the bound and above.
fn domains() -> [String; 8] {
    [
        DOMAIN.to_owned(),
        DOMAIN.to_owned(),
        DOMAIN.to_owned(),
        "other".to_owned(),
        String::new(),
        RAW.to_owned(),
        "d".repeat(MAX_DOMAIN_LEN),
        "d".repeat(MAX_DOMAIN_LEN + 1),
    ]
}

impl Bytes<'_> {
    /// `choice`, or for [`RAW`] up to 63 input bytes as lossy UTF-8.
    fn text(&mut self, choice: &str) -> String {
        if choice != RAW {
            return choice.to_owned();
        }
        let n = usize::from(self.u8() % 64);
        String::from_utf8_lossy(self.take(n)).into_owned()
    }
}

/// The next request of the input.
pub(super) fn request(
    b: &mut Bytes<'_>,
    keys: &[String; 16],
    values: &[String; 16],
) -> RateLimitRequest {
    let d = usize::from(b.u8() % 8);
    let domain = b.text(&domains()[d]);
    let hits_addend = REQUEST_HITS[usize::from(b.u8() % 8)];
    let count = DESCRIPTORS[usize::from(b.u8() % 16)];
    let descriptors = (0..count)
        .map(|_| {
            let f = b.u8();
            let sel = f & 15;
            let entries = (0..ENTRIES[usize::from(f >> 4)])
                .map(|_| {
                    let e = b.u8();
                    Entry {
                        key: b.text(&keys[usize::from(e & 15)]),
                        value: b.text(&values[usize::from(e >> 4)]),
                    }
                })
                .collect();
            RateLimitDescriptor {
                entries,
                limit: None,
                hits_addend: (8..15).contains(&sel).then(|| UInt64Value {
                    value: DESCRIPTOR_HITS[usize::from(sel - 8)],
                }),
                is_negative_hits: sel == 15,
            }
        })
        .collect();
    RateLimitRequest {
        domain,
        descriptors,
        hits_addend,
    }
}
