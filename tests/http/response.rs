//! `tollgate::http`: the one place where a `Decision` becomes a response.

use std::time::Duration;

use http::{HeaderMap, HeaderValue, Response};
use serde_json::{json, Value};
use tollgate::http::{
    combine, policy_header, remaining_header, Answer, Combined, RequestId, MAX_REQUEST_ID_LEN,
};
use tollgate::{BucketKind, Cause, Decision, Profile, Remaining};

fn example() -> Profile {
    Profile::from_path("examples/profiles/example.yaml").unwrap()
}

fn throttle(ms: u64, bucket: BucketKind) -> Decision {
    Decision::Throttle {
        retry_after: Duration::from_millis(ms),
        bucket,
    }
}

fn unavailable(wait: Option<u64>, cause: Cause) -> Decision {
    Decision::Unavailable {
        retry_after: wait.map(Duration::from_millis),
        cause,
    }
}

fn body(r: &Response<Vec<u8>>) -> Value {
    serde_json::from_slice(r.body()).unwrap()
}

#[test]
fn throttle_is_an_exact_429() {
    let p = example();
    let id = RequestId::parse("req-42").unwrap();
    let policy = policy_header(p.route_class("write").unwrap());
    let r: Response<Vec<u8>> = Answer::new(throttle(1_500, BucketKind::Burst), &p, &id)
        .with_policy(&policy)
        .refusal()
        .unwrap();
    assert_eq!(r.status(), 429);
    let h = r.headers();
    assert_eq!(h["content-type"], "application/problem+json");
    assert_eq!(h["cache-control"], "no-store");
    assert_eq!(h["retry-after"], "2");
    assert_eq!(h["x-request-id"], "req-42");
    assert_eq!(
        h["ratelimit-policy"],
        "\"burst\";q=10;w=1, \"sustained\";q=1200;w=3600"
    );
    assert!(h.get("ratelimit").is_none(), "expose_remaining is off");
    assert_eq!(
        body(&r),
        json!({
            "type": "https://errors.example.com/rate-limited",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "You have used your burst quota for this route; retry after 2 seconds.",
            "code": "rate_limited",
            "request_id": "req-42",
            "retry_after": 2,
            "violated-policies": ["burst"],
        })
    );
}

#[test]
fn capacity_and_store_are_503_and_omit_unknown_waits() {
    let p = example();
    let id = RequestId::parse("r").unwrap();
    let full: Response<Vec<u8>> = Answer::new(unavailable(None, Cause::TableFull), &p, &id)
        .refusal()
        .unwrap();
    assert_eq!(full.status(), 503);
    assert_eq!(full.headers()["cache-control"], "no-store");
    assert_eq!(full.headers()["content-type"], "application/problem+json");
    assert!(full.headers().get("retry-after").is_none());
    assert_eq!(
        body(&full),
        json!({
            "type": "https://errors.example.com/over-capacity",
            "title": "Service Unavailable",
            "status": 503,
            "detail": "The service is at capacity; retry later.",
            "code": "over_capacity",
            "request_id": "r",
        })
    );

    let shard: Response<Vec<u8>> = Answer::new(unavailable(Some(200), Cause::ShardFull), &p, &id)
        .refusal()
        .unwrap();
    assert_eq!(shard.headers()["retry-after"], "1");
    assert_eq!(body(&shard)["retry_after"], 1);
    assert_eq!(body(&shard)["code"], "over_capacity");
    // Tenant share and shard full read the same to the caller.
    let share: Response<Vec<u8>> = Answer::new(unavailable(Some(200), Cause::TenantShare), &p, &id)
        .refusal()
        .unwrap();
    assert_eq!(body(&share), body(&shard));

    let store: Response<Vec<u8>> = Answer::new(unavailable(None, Cause::StoreUnavailable), &p, &id)
        .refusal()
        .unwrap();
    assert_eq!(store.status(), 503);
    assert!(store.headers().get("retry-after").is_none());
    assert_eq!(body(&store)["code"], "limiter_unavailable");
    assert_eq!(
        body(&store)["type"],
        "https://errors.example.com/limiter-unavailable"
    );
    assert!(body(&store).get("retry_after").is_none());
}

#[test]
fn retry_after_is_capped_by_the_profile() {
    let mut p = example();
    p.retry_after.max = tollgate::profile::Period::from_secs(60).unwrap();
    let id = RequestId::generate();
    let long = throttle(86_400_000, BucketKind::Sustained);
    let r: Response<Vec<u8>> = Answer::new(long, &p, &id).refusal().unwrap();
    assert_eq!(r.headers()["retry-after"], "60");
    assert_eq!(body(&r)["retry_after"], 60);
    assert_eq!(body(&r)["violated-policies"], json!(["sustained"]));
}

#[test]
fn admitted_answers_carry_policy_and_only_opted_in_remaining() {
    let mut p = example();
    let id = RequestId::generate();
    let read = *p.route_class("read").unwrap();
    let policy = policy_header(&read);
    let mine = Remaining {
        burst: 49,
        sustained: 5999,
    };
    let admit = Answer::new(Decision::Admit, &p, &id)
        .with_policy(&policy)
        .with_remaining(Some(mine), &read);
    assert!(admit.refusal::<Vec<u8>>().is_none());
    assert!(admit.problem().is_none());
    let mut h = HeaderMap::new();
    admit.write_headers(&mut h);
    assert_eq!(
        h["ratelimit-policy"],
        "\"burst\";q=50;w=1, \"sustained\";q=6000;w=3600"
    );
    assert!(h.get("ratelimit").is_none());
    assert!(h.get("retry-after").is_none());
    assert!(h.get("cache-control").is_none());
    assert_eq!(h["x-request-id"], id.as_str());

    p.expose_remaining = true;
    let mut h = HeaderMap::new();
    Answer::new(Decision::Admit, &p, &id)
        .with_policy(&policy)
        .with_remaining(Some(mine), &read)
        .write_headers(&mut h);
    // One burst token (1/50 s) and one sustained token (0.6 s) to refill, rounded up.
    assert_eq!(
        h["ratelimit"],
        "\"burst\";r=49;t=1, \"sustained\";r=5999;t=1"
    );
    assert_eq!(remaining_header(mine, &read), h["ratelimit"]);
}

#[test]
fn ratelimit_t_is_the_callers_own_time_to_a_full_bucket_rounded_up() {
    let p = example();
    // read: burst 50 per 1 s, sustained 6000 per 3600 s.
    let read = p.route_class("read").unwrap();
    let t = |burst, sustained| {
        remaining_header(Remaining { burst, sustained }, read)
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(t(50, 6000), "\"burst\";r=50;t=0, \"sustained\";r=6000;t=0");
    assert_eq!(t(0, 0), "\"burst\";r=0;t=1, \"sustained\";r=0;t=3600");
    assert_eq!(t(25, 5990), "\"burst\";r=25;t=1, \"sustained\";r=5990;t=6");
    assert_eq!(
        t(49, 5000),
        "\"burst\";r=49;t=1, \"sustained\";r=5000;t=600"
    );
}

#[test]
fn policy_windows_round_up_to_whole_seconds() {
    let p = Profile::from_yaml(
        r#"
name: t
identities: { capacity: 16 }
route_classes:
  fast:
    burst:     { tokens: 5,  per: 250ms }
    sustained: { tokens: 90, per: 1500ms }
"#,
    )
    .unwrap();
    assert_eq!(
        policy_header(p.route_class("fast").unwrap()),
        HeaderValue::from_static("\"burst\";q=5;w=1, \"sustained\";q=90;w=2")
    );
}

#[test]
fn request_ids_are_checked() {
    assert_eq!(RequestId::parse("abc-1.2_3").unwrap().as_str(), "abc-1.2_3");
    assert!(RequestId::parse("").is_none());
    assert!(RequestId::parse("has space").is_none());
    assert!(RequestId::parse("<script>").is_none());
    assert!(RequestId::parse("é").is_none());
    assert!(RequestId::parse(&"a".repeat(MAX_REQUEST_ID_LEN)).is_some());
    assert!(RequestId::parse(&"a".repeat(MAX_REQUEST_ID_LEN + 1)).is_none());

    let generated = RequestId::generate();
    assert_eq!(generated.as_str().len(), 32);
    assert!(generated.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
    assert_ne!(generated, RequestId::generate());

    let mut h = HeaderMap::new();
    h.insert("x-request-id", HeaderValue::from_static("client-7"));
    assert_eq!(RequestId::from_headers(&h).as_str(), "client-7");
    h.append("x-request-id", HeaderValue::from_static("client-8"));
    assert_eq!(
        RequestId::from_headers(&h).as_str().len(),
        32,
        "two ids: neither is believed"
    );
    h.insert("x-request-id", HeaderValue::from_static("bad id"));
    assert_ne!(RequestId::from_headers(&h).as_str(), "bad id");
}

#[test]
fn combine_takes_the_most_restrictive_with_the_longest_known_wait() {
    let admit = Decision::Admit;
    assert_eq!(combine([]), admit);
    assert_eq!(combine([admit, admit]), admit);
    // Two throttles: the longest wait and its bucket.
    assert_eq!(
        combine([
            throttle(500, BucketKind::Burst),
            admit,
            throttle(9_000, BucketKind::Sustained)
        ]),
        throttle(9_000, BucketKind::Sustained)
    );
    // A 503 with a known wait beats a 429, and keeps the longer of both waits.
    assert_eq!(
        combine([
            throttle(5_000, BucketKind::Burst),
            unavailable(Some(1_000), Cause::ShardFull)
        ]),
        unavailable(Some(5_000), Cause::ShardFull)
    );
    // An unknown wait beats everything, and no wait is invented for it.
    assert_eq!(
        combine([
            throttle(5_000, BucketKind::Burst),
            unavailable(None, Cause::StoreUnavailable),
            unavailable(Some(1_000), Cause::TenantShare),
        ]),
        unavailable(None, Cause::StoreUnavailable)
    );
    // Among unknown waits the store is named before the table.
    assert_eq!(
        combine([
            unavailable(None, Cause::StoreUnavailable),
            unavailable(None, Cause::TableFull)
        ]),
        unavailable(None, Cause::StoreUnavailable)
    );
    assert_eq!(
        combine([
            unavailable(None, Cause::TableFull),
            unavailable(None, Cause::StoreUnavailable)
        ]),
        unavailable(None, Cause::StoreUnavailable)
    );

    let mut c = Combined::new();
    c.push("gateway", admit)
        .push("application", throttle(2_000, BucketKind::Burst));
    assert_eq!(c.decision(), throttle(2_000, BucketKind::Burst));
    assert_eq!(c.layers().len(), 2);
    assert_eq!(c.layers()[0].layer, "gateway");
    assert_eq!(c.layers()[0].decision, admit);
    assert_eq!(c.layers()[1].layer, "application");
}

#[test]
fn a_cost_larger_than_the_bucket_is_a_429_without_retry_after() {
    let p = example();
    let id = RequestId::parse("req-7").unwrap();
    let exceeds = Decision::Exceeds {
        bucket: BucketKind::Sustained,
    };
    let r: Response<Vec<u8>> = Answer::new(exceeds, &p, &id).refusal().unwrap();
    assert_eq!(r.status(), 429);
    let h = r.headers();
    assert!(
        h.get("retry-after").is_none(),
        "no wait would help: none is sent"
    );
    assert_eq!(h["cache-control"], "no-store");
    // The example profile predates weighted cost: its catalog has no `cost_exceeds`, so the
    // default entry answers.
    assert_eq!(
        body(&r),
        json!({
            "type": "about:blank",
            "title": "Request Cost Exceeds Limit",
            "status": 429,
            "detail": "This request's cost is more than your sustained quota for this route can \
                       hold when full; it will not be admitted at this cost, so do not retry it.",
            "code": "cost_exceeds_limit",
            "request_id": "req-7",
            "violated-policies": ["sustained"],
        })
    );
    // A profile may name its own code.
    let custom = Profile::from_yaml(
        "name: c\nidentities: { capacity: 16 }\nroute_classes:\n  r:\n    \
         burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 2, per: 1h }\n\
         catalog:\n  cost_exceeds: { code: too_costly, type: \"https://errors.example.com/too-costly\" }\n",
    )
    .unwrap();
    assert_eq!(exceeds.catalog_code(&custom), Some("too_costly"));
    // Combined with other layers, it wins: waiting helps none of them.
    assert_eq!(
        combine([
            unavailable(None, Cause::StoreUnavailable),
            exceeds,
            throttle(5_000, BucketKind::Burst)
        ]),
        exceeds
    );
}
