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
use tollgate::{BucketKind, Decision, Key, Limiter, Profile, Refused, RouteClass};
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus, RateLimit,
};
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tollgate_server::envoy_types::pb::google::protobuf::Duration as PbDuration;
use tollgate_server::RateLimiter;

mod expect;
mod input;
mod model;

use super::bytes::Bytes;
use expect::*;
use input::*;
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

/// A long run of the bound-sized values' letter: an identity too (it may be a tenant id).
fn long_value_run() -> String {
    "v".repeat(64)
}

/// Polls a future of the embedded backend once: it decides without waiting.
fn ready<F: Future>(f: F) -> F::Output {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the embedded limiter's service never waits"),
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

/// One input's run: the served limiter behind the service, its twin the model decides on,
/// and the identities whose `peek` is part of the compared state.
struct Run {
    service: RateLimiter<Limiter>,
    limiter: Arc<Limiter>,
    server_clock: Arc<Mock>,
    twin: Limiter,
    twin_clock: Arc<Mock>,
    classes: [RouteClass; 2],
    probes: Vec<Key<'static>>,
    refuse_unknown: bool,
    refuse_unmatched: bool,
    expose: bool,
}

/// Runs one input; panics on a failed check.
pub fn check(data: &[u8]) {
    let mut b = Bytes(data);
    let run = Run::new(b.u8());
    let (keys, values) = (keys(), values());
    let mut ops = 0;
    while !b.0.is_empty() && ops < 64 {
        ops += 1;
        let op = b.u8();
        match op % 8 {
            0 => run.advance(u64::from(b.u16()) * 100_000),
            1 => run.advance(u64::from(b.u16()) * 1_000_000_000),
            _ => run.request(&request(&mut b, &keys, &values)),
        }
    }
}

impl Run {
    fn new(flags: u8) -> Run {
        let (server_limiter, server_clock) = build(profile(flags));
        let (twin, twin_clock) = build(profile(flags));
        let service = RateLimiter::new(Arc::new(server_limiter)).expect("the profile has rules");
        let limiter = Arc::clone(service.backend());
        let classes = [
            twin.route_class("read").unwrap(),
            twin.route_class("write").unwrap(),
        ];
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
        Run {
            service,
            limiter,
            server_clock,
            twin,
            twin_clock,
            classes,
            probes,
            refuse_unknown: flags & 1 == 1,
            refuse_unmatched: flags >> 1 & 1 == 1,
            expose: flags >> 2 & 1 == 1,
        }
    }

    fn advance(&self, nanos: u64) {
        self.server_clock.increment(nanos);
        self.twin_clock.increment(nanos);
    }

    /// Serves `req` and checks the answer and the state against the model.
    fn request(&self, req: &RateLimitRequest) {
        let before = state(&self.limiter, &self.probes);
        let got = ready(self.service.should_rate_limit(req, None));
        let after = state(&self.limiter, &self.probes);
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
        no_identity(&text, req, &own_ids);

        let refused_with = |got: Result<RateLimitResponse, tonic::Status>, code, why: &str| {
            let status = got.expect_err(why);
            assert_eq!(status.code(), code, "{req:?}");
            unchanged();
        };
        let Some(costs) = model_costs(req) else {
            return refused_with(
                got,
                tonic::Code::InvalidArgument,
                "a malformed request is refused",
            );
        };
        if req.domain != DOMAIN {
            if self.refuse_unknown {
                return refused_with(got, tonic::Code::NotFound, "an unknown domain is refused");
            }
            let resp = got.expect("an unknown domain is answered OK");
            assert_eq!(resp.overall_code, Code::Ok as i32);
            assert_eq!(resp.statuses, vec![bare_ok(); req.descriptors.len()]);
            assert!(resp.response_headers_to_add.is_empty(), "{resp:?}");
            assert!(resp.raw_body.is_empty(), "{resp:?}");
            return unchanged();
        }
        let (items, at) = match plan(req, &costs, self.classes, self.refuse_unmatched) {
            Plan::Invalid => {
                let why = "a descriptor that makes no key is refused";
                return refused_with(got, tonic::Code::InvalidArgument, why);
            }
            Plan::Denied => {
                let why = "an unmatched descriptor is refused";
                return refused_with(got, tonic::Code::PermissionDenied, why);
            }
            Plan::Decide { items, at } => (items, at),
        };
        let want = self.twin.admit_all(&items);
        assert!(
            state(&self.twin, &self.probes) == after,
            "the server charged other keys or costs than the model maps: {req:?}"
        );
        match want {
            Ok(()) => self.admitted(req, got, &items, &at),
            Err(refused) => {
                unchanged();
                self.refused(req, got, &items, &at, refused, &own_ids);
            }
        }
    }

    /// The route class's place (read 0, write 1).
    fn class_of(&self, k: &Key<'_>) -> usize {
        usize::from(k.class() == self.classes[1])
    }

    /// The `RateLimit-Policy` of `k`'s class.
    fn policy(&self, k: &Key<'_>) -> String {
        let profile = self.twin.profile();
        let class = profile
            .route_classes
            .iter()
            .nth(self.class_of(k))
            .unwrap()
            .1;
        policy_header(class).to_str().unwrap().to_owned()
    }

    /// The caller's own tokens left in the bucket, as the response shows them.
    fn remaining(&self, k: &Key<'_>, kind: BucketKind) -> u32 {
        if !self.expose {
            return 0;
        }
        let r = self.twin.remaining(k);
        let left = match kind {
            BucketKind::Burst => r.burst,
            BucketKind::Sustained => r.sustained,
        };
        u32::try_from(left).unwrap_or(u32::MAX)
    }

    /// Every item admitted: OK, each decided descriptor with its class's burst and what is
    /// left, the first item's policy, no body.
    fn admitted(
        &self,
        req: &RateLimitRequest,
        got: Result<RateLimitResponse, tonic::Status>,
        items: &[(Key<'_>, u32)],
        at: &[Option<usize>],
    ) {
        let resp = got.expect("admitted");
        assert_eq!(resp.overall_code, Code::Ok as i32, "{req:?}");
        let statuses: Vec<DescriptorStatus> = at
            .iter()
            .map(|slot| match slot {
                None => bare_ok(),
                Some(j) => {
                    let k = &items[*j].0;
                    let left = self.remaining(k, BucketKind::Burst);
                    limited(Code::Ok, self.class_of(k), BucketKind::Burst, None, left)
                }
            })
            .collect();
        assert_eq!(resp.statuses, statuses, "{req:?}");
        let headers: Vec<(String, String)> = items
            .first()
            .map(|(k, _)| ("ratelimit-policy".to_owned(), self.policy(k)))
            .into_iter()
            .collect();
        assert_eq!(headers_of(&resp), headers, "{req:?}");
        assert!(resp.raw_body.is_empty());
    }

    /// An item refused: `UNAVAILABLE` for shared capacity, else `OVER_LIMIT` with the refused
    /// descriptor's status, the policy, `Retry-After` when a wait helps, the request id (the
    /// caller's own, or a fresh one) and a problem body.
    fn refused(
        &self,
        req: &RateLimitRequest,
        got: Result<RateLimitResponse, tonic::Status>,
        items: &[(Key<'_>, u32)],
        at: &[Option<usize>],
        refused: Refused,
        own_ids: &[&str],
    ) {
        let key = &items[refused.index].0;
        let (kind, wait) = match refused.decision {
            Decision::Throttle { bucket, .. } => (bucket, refused.decision.retry_after()),
            Decision::Exceeds { bucket } => (bucket, None),
            Decision::Unavailable { .. } => {
                let status = got.expect_err("shared capacity is UNAVAILABLE");
                assert_eq!(status.code(), tonic::Code::Unavailable, "{req:?}");
                return;
            }
            Decision::Admit => unreachable!("a refusal"),
        };
        let resp = got.expect("over limit");
        assert_eq!(resp.overall_code, Code::OverLimit as i32, "{req:?}");
        let statuses: Vec<DescriptorStatus> = at
            .iter()
            .map(|slot| match slot {
                Some(j) if *j == refused.index => {
                    let left = self.remaining(key, kind);
                    limited(Code::OverLimit, self.class_of(key), kind, wait, left)
                }
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
        assert_eq!(header("ratelimit-policy"), Some(self.policy(key).as_str()));
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
