//! The `rls_request` check: what `fuzz/fuzz_targets/rls_request.rs` runs on every input, and what
//! `server/tests/rls/fuzz_corpus.rs` replays on stable over `fuzz/corpus/rls_request/`.
//!
//! Arbitrary `RateLimitRequest`s (domain; descriptors with entries of arbitrary keys and values,
//! empty, at the bounds, above them, and many; request and per-descriptor `hits_addend`,
//! 0 and `u32::MAX` included; `is_negative_hits`) through tollgate-server's
//! [`RateLimiter::should_rate_limit`] over the embedded limiter on a mock clock, between clock
//! moves, under a profile whose `unknown_domain`, `unmatched`, `expose_remaining`, shared
//! capacity and identity share the input picks. For every request:
//!
//! - the outcome is the one an independent model of the request bounds and of the profile's four
//!   rules (written here, not the server's code) says: `INVALID_ARGUMENT` for a malformed request
//!   or descriptor, `NOT_FOUND` / OK for another domain, `PERMISSION_DENIED` / not limited for
//!   an unmatched descriptor, else the decision a twin limiter gives the keys and costs the model
//!   mapped (`admit_all`), `UNAVAILABLE` for shared capacity;
//! - an error or a refusal charges nothing: the limiter's snapshot (every identity's buckets) and
//!   `peek` of every probe identity (shared capacity included) are as before;
//! - after every request the server's limiter and the twin are in the same state (snapshots
//!   equal), so the server charged exactly the keys and costs the model says;
//! - every response field is the model's: statuses one per descriptor, the refused one with its
//!   bucket, wait and the caller's own remaining tokens (0 unless `expose_remaining`), the others
//!   bare OK; `RateLimit-Policy` of the right class; `X-Request-Id` the request's own or fresh;
//!   and no field nor error message carries an identity (a tenant, principal or address of any
//!   caller), except a caller's own request id echoed.
//!
//! Input: byte 0 is the profile (bit 0 `unknown_domain: refuse`, 1 `unmatched: refuse`,
//! 2 `expose_remaining`, 3 a shared capacity of 5 slots a second, 4 `identities.tenant_share`
//! 0.25). Then operations: `op % 8` 0 moves the clock `u16` x 100 µs, 1 moves it `u16` x 1 s,
//! anything else is a request: a domain byte, a request `hits_addend` byte, a descriptor-count
//! byte, and per descriptor a byte (bits 0-3 its `hits_addend` or `is_negative_hits`, bits 4-7
//! its entry count) and one byte per entry (bits 0-3 the key, 4-7 the value). Tables below;
//! a `RAW` choice reads a length byte and that many input bytes (lossy UTF-8).

use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, Waker};
use core::time::Duration;
use std::net::IpAddr;
use std::sync::Arc;

use tollgate::http::{policy_header, RequestId, BURST_POLICY, SUSTAINED_POLICY};
use tollgate::quanta::{Clock, Mock};
use tollgate::{BucketKind, Decision, Key, Limiter, Profile};
use tollgate_server::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus, RateLimit,
};
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tollgate_server::envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt64Value};
use tollgate_server::request::{MAX_DOMAIN_LEN, MAX_KEY_LEN, MAX_VALUE_LEN};
use tollgate_server::RateLimiter;

mod expect;
mod model;

use expect::*;
use model::*;

/// The served domain.
const DOMAIN: &str = "edge";

/// The profile, `{flags}` filled from byte 0. Rules, first match wins: 0 `generic_key: reports`
/// charges `write`; 1 the class named by entry `class`; 2 `read`; 3 an anonymous address.
fn profile(flags: u8) -> Profile {
    let bit = |i: u8| flags >> i & 1 == 1;
    let refuse = |b: bool| if b { "refuse" } else { "allow" };
    let capacity = if bit(3) {
        "shared_capacity: { shards: 1, window: 1s, slots_per_window: 5, tenant_share: 1.0 }\n"
    } else {
        ""
    };
    let src = format!(
        "name: fuzz-rls\n\
         identities: {{ capacity: 64, tenant_share: {share} }}\n\
         expose_remaining: {expose}\n\
         route_classes:\n  \
           read:\n    burst: {{ tokens: 3, per: 1s }}\n    sustained: {{ tokens: 20, per: 1h }}\n  \
           write:\n    burst: {{ tokens: 2, per: 1s }}\n    sustained: {{ tokens: 5, per: 1m }}\n\
         {capacity}\
         descriptors:\n  \
           domain: {DOMAIN}\n  \
           unknown_domain: {unknown}\n  \
           unmatched: {unmatched}\n  \
           rules:\n    \
             - {{ when: {{ generic_key: reports }}, tenant: tenant, principal: user, class: write }}\n    \
             - {{ tenant: tenant, principal: user, class_from: class }}\n    \
             - {{ tenant: tenant, principal: user, class: read }}\n    \
             - {{ anonymous: remote_address, class: read }}\n",
        share = if bit(4) { "0.25" } else { "1" },
        expose = bit(2),
        unknown = refuse(bit(0)),
        unmatched = refuse(bit(1)),
    );
    Profile::from_yaml(&src).expect("the generated profile is valid")
}

/// `(tokens, unit)` of each class's buckets, as the profile above says (read, write).
const LIMITS: [[(u32, Unit); 2]; 2] = [
    [(3, Unit::Second), (20, Unit::Hour)],
    [(2, Unit::Second), (5, Unit::Minute)],
];

/// A marker in the tables: read a length byte and that many input bytes.
const RAW: &str = "\u{0}raw";

/// Identities: none of them may appear in any response (but a caller's own request id echoed).
const IDENTITIES: [&str; 7] = [
    "tenant-acme",
    "tenant-globex",
    "user-alice",
    "user-bob",
    "10.1.2.3",
    "10.1.2.200",
    "2001:db8::7",
];

fn keys() -> [String; 16] {
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

fn values() -> [String; 16] {
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

/// A long run of the bound-sized values' letter: an identity too (it may be a tenant id).
fn long_value_run() -> String {
    "v".repeat(64)
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

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    /// `choice`, or for [`RAW`] up to 63 input bytes as lossy UTF-8.
    fn text(&mut self, choice: &str) -> String {
        if choice != RAW {
            return choice.to_owned();
        }
        let n = usize::from(self.u8() % 64).min(self.0.len());
        let (s, rest) = self.0.split_at(n);
        self.0 = rest;
        String::from_utf8_lossy(s).into_owned()
    }
}

/// Polls a future of the embedded backend once: it decides without waiting.
fn ready<F: Future>(f: F) -> F::Output {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the embedded limiter's service never waits"),
    }
}

fn request(b: &mut Bytes<'_>, keys: &[String; 16], values: &[String; 16]) -> RateLimitRequest {
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

/// Everything a limiter holds that a request may change: every identity's buckets (its
/// snapshot, with the wall clock fixed) and `peek` of every probe identity (which counts
/// shared capacity and the tenants' shares too).
fn state(limiter: &Limiter, probes: &[Key<'_>]) -> (Vec<u8>, Vec<Decision>) {
    let mut snapshot = Vec::new();
    limiter.snapshot(&mut snapshot).expect("to a Vec");
    (snapshot, probes.iter().map(|k| limiter.peek(k)).collect())
}

fn build(profile: Profile) -> (Limiter, Arc<Mock>) {
    let (clock, mock) = Clock::mock();
    let limiter = Limiter::builder(profile)
        .clock(clock)
        .key_secret(b"fuzz-rls")
        .wall_clock(|| std::time::UNIX_EPOCH)
        .build()
        .expect("a small table");
    (limiter, mock)
}

/// Runs one input; panics on a failed check.
pub fn check(data: &[u8]) {
    let mut b = Bytes(data);
    let flags = b.u8();
    let (server_limiter, server_clock) = build(profile(flags));
    let (twin, twin_clock) = build(profile(flags));
    let service = RateLimiter::new(Arc::new(server_limiter)).expect("the profile has rules");
    let limiter = Arc::clone(service.backend());
    let classes = [
        twin.route_class("read").unwrap(),
        twin.route_class("write").unwrap(),
    ];
    let (refuse_unknown, refuse_unmatched, expose) =
        (flags & 1 == 1, flags >> 1 & 1 == 1, flags >> 2 & 1 == 1);
    let ips: Vec<IpAddr> = IDENTITIES[4..].iter().map(|a| a.parse().unwrap()).collect();
    let mut probes = Vec::new();
    for c in classes {
        for t in &IDENTITIES[..2] {
            for p in &IDENTITIES[2..4] {
                probes.push(Key::authenticated(t, p, c).unwrap());
            }
        }
        probes.extend(ips.iter().map(|ip| Key::anonymous(*ip, c)));
    }
    let (keys, values) = (keys(), values());
    let mut ops = 0;
    while !b.0.is_empty() && ops < 64 {
        ops += 1;
        let op = b.u8();
        let step = match op % 8 {
            0 => Some(u64::from(b.u16()) * 100_000),
            1 => Some(u64::from(b.u16()) * 1_000_000_000),
            _ => None,
        };
        if let Some(d) = step {
            server_clock.increment(d);
            twin_clock.increment(d);
            continue;
        }
        let req = request(&mut b, &keys, &values);
        let before = state(&limiter, &probes);
        let got = ready(service.should_rate_limit(&req, None));
        let after = state(&limiter, &probes);
        let unchanged = || {
            assert!(
                before == after,
                "a request that charged nothing changed the limiter: {req:?}"
            )
        };
        let own_ids: Vec<&str> = req
            .descriptors
            .iter()
            .flat_map(|d| &d.entries)
            .filter(|e| e.key == "x-request-id")
            .map(|e| e.value.as_str())
            .collect();
        let mut text = match &got {
            Ok(resp) => response_text(resp),
            Err(status) => status.message().to_owned(),
        };
        text.push('\n');
        no_identity(&text, &req, &own_ids);

        let Some(costs) = model_costs(&req) else {
            let status = got.expect_err("a malformed request is refused");
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{req:?}");
            unchanged();
            continue;
        };
        if req.domain != DOMAIN {
            if refuse_unknown {
                let status = got.expect_err("an unknown domain is refused");
                assert_eq!(status.code(), tonic::Code::NotFound, "{req:?}");
            } else {
                let resp = got.expect("an unknown domain is answered OK");
                assert_eq!(resp.overall_code, Code::Ok as i32);
                assert_eq!(resp.statuses, vec![bare_ok(); req.descriptors.len()]);
                assert!(resp.response_headers_to_add.is_empty(), "{resp:?}");
                assert!(resp.raw_body.is_empty(), "{resp:?}");
            }
            unchanged();
            continue;
        }
        let (items, at) = match plan(&req, &costs, classes, refuse_unmatched) {
            Plan::Invalid => {
                let status = got.expect_err("a descriptor that makes no key is refused");
                assert_eq!(status.code(), tonic::Code::InvalidArgument, "{req:?}");
                unchanged();
                continue;
            }
            Plan::Denied => {
                let status = got.expect_err("an unmatched descriptor is refused");
                assert_eq!(status.code(), tonic::Code::PermissionDenied, "{req:?}");
                unchanged();
                continue;
            }
            Plan::Decide { items, at } => (items, at),
        };
        let want = twin.admit_all(&items);
        assert!(
            state(&twin, &probes) == after,
            "the server charged other keys or costs than the model maps: {req:?}"
        );
        let class_of = |k: &Key<'_>| usize::from(k.class() == classes[1]);
        let policy = |k: &Key<'_>| {
            policy_header(
                twin.profile()
                    .route_classes
                    .iter()
                    .nth(class_of(k))
                    .unwrap()
                    .1,
            )
        };
        let remaining = |k: &Key<'_>, kind: BucketKind| {
            if !expose {
                return 0;
            }
            let r = twin.remaining(k);
            let left = match kind {
                BucketKind::Burst => r.burst,
                BucketKind::Sustained => r.sustained,
            };
            u32::try_from(left).unwrap_or(u32::MAX)
        };
        match want {
            Ok(()) => {
                let resp = got.expect("admitted");
                assert_eq!(resp.overall_code, Code::Ok as i32, "{req:?}");
                let statuses: Vec<DescriptorStatus> = at
                    .iter()
                    .map(|slot| match slot {
                        None => bare_ok(),
                        Some(j) => {
                            let k = &items[*j].0;
                            limited(
                                Code::Ok,
                                class_of(k),
                                BucketKind::Burst,
                                None,
                                remaining(k, BucketKind::Burst),
                            )
                        }
                    })
                    .collect();
                assert_eq!(resp.statuses, statuses, "{req:?}");
                let headers: Vec<(String, String)> = items
                    .first()
                    .map(|(k, _)| {
                        (
                            "ratelimit-policy".to_owned(),
                            policy(k).to_str().unwrap().to_owned(),
                        )
                    })
                    .into_iter()
                    .collect();
                assert_eq!(headers_of(&resp), headers, "{req:?}");
                assert!(resp.raw_body.is_empty());
            }
            Err(refused) => {
                unchanged();
                let key = &items[refused.index].0;
                let (kind, wait) = match refused.decision {
                    Decision::Throttle { bucket, .. } => (bucket, refused.decision.retry_after()),
                    Decision::Exceeds { bucket } => (bucket, None),
                    Decision::Unavailable { .. } => {
                        let status = got.expect_err("shared capacity is UNAVAILABLE");
                        assert_eq!(status.code(), tonic::Code::Unavailable, "{req:?}");
                        continue;
                    }
                    Decision::Admit => unreachable!("a refusal"),
                };
                let resp = got.expect("over limit");
                assert_eq!(resp.overall_code, Code::OverLimit as i32, "{req:?}");
                let statuses: Vec<DescriptorStatus> = at
                    .iter()
                    .map(|slot| match slot {
                        Some(j) if *j == refused.index => limited(
                            Code::OverLimit,
                            class_of(key),
                            kind,
                            wait,
                            remaining(key, kind),
                        ),
                        _ => bare_ok(),
                    })
                    .collect();
                assert_eq!(resp.statuses, statuses, "{req:?}");
                let headers = headers_of(&resp);
                let header = |name: &str| {
                    headers
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.as_str())
                };
                assert_eq!(header("ratelimit-policy"), policy(key).to_str().ok());
                assert_eq!(header("cache-control"), Some("no-store"));
                assert_eq!(
                    header("retry-after").is_some(),
                    wait.is_some(),
                    "{headers:?}"
                );
                let id = header("x-request-id").expect("a request id");
                match own_ids.first().and_then(|v| RequestId::parse(v)) {
                    Some(own) => assert_eq!(id, own.as_str()),
                    None => assert!(
                        id.len() == 32 && id.bytes().all(|c| c.is_ascii_hexdigit()),
                        "a fresh id, not {id:?}"
                    ),
                }
                assert!(!resp.raw_body.is_empty(), "a problem body");
            }
        }
    }
}
