//! Every field of the answer: statuses (`code`, `current_limit` only for whole Envoy units,
//! `limit_remaining` only when exposed, `duration_until_reset` exact), the headers Envoy adds,
//! the problem body; and a capacity refusal as `UNAVAILABLE`.

use std::time::Duration;

use tollgate::{Decision, Key, Limiter, Profile};
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;

use crate::*;

/// The wait the engine itself gives after `n` admissions of one key of `class` on a fresh
/// limiter of `yaml`: the oracle for `duration_until_reset`.
fn engine_wait(yaml: &str, class: &str, n: usize) -> Duration {
    let (clock, _mock) = tollgate::quanta::Clock::mock();
    let l = Limiter::builder(Profile::from_yaml(yaml).unwrap())
        .clock(clock)
        .build()
        .unwrap();
    let key = Key::authenticated("acme", "alice", l.route_class(class).unwrap()).unwrap();
    for _ in 0..n {
        assert_eq!(l.admit(&key), Decision::Admit);
    }
    l.admit(&key).retry_after().expect("throttled")
}

#[tokio::test]
async fn an_admitted_request_gets_ok_statuses_and_its_policy() {
    let mut s = start(PROFILE).await;
    let stray = desc(&[("destination_cluster", "upstream")]);
    let r = ask(&mut s, req("edge", vec![alice("read"), stray], 0)).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses.len(), 2);
    let limit = r.statuses[0]
        .current_limit
        .as_ref()
        .expect("1s is an Envoy unit");
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (3, Unit::Second as i32)
    );
    assert_eq!(limit.name, "burst");
    assert_eq!(
        r.statuses[0].limit_remaining, 0,
        "not exposed by this profile"
    );
    assert_eq!(r.statuses[0].duration_until_reset, None);
    assert_eq!(r.statuses[1].current_limit, None);
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some("\"burst\";q=3;w=1, \"sustained\";q=100;w=3600")
    );
    assert!(r.raw_body.is_empty());
    assert_eq!(header(&r, "retry-after"), None);
    s.stop().await;
}

#[tokio::test]
async fn over_limit_carries_the_exact_wait_the_headers_and_the_problem() {
    let mut s = start(PROFILE).await;
    for _ in 0..3 {
        assert_eq!(
            ask(&mut s, req("edge", vec![alice("read")], 0))
                .await
                .overall_code,
            OK
        );
    }
    let mut request = tonic::Request::new(req("edge", vec![alice("read")], 0));
    request
        .metadata_mut()
        .insert("x-request-id", "req-42".parse().unwrap());
    let r = s
        .client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OVER_LIMIT);
    let st = &r.statuses[0];
    assert_eq!(st.code, OVER_LIMIT);
    let wait = engine_wait(PROFILE, "read", 3);
    let d = st.duration_until_reset.expect("a wait");
    assert_eq!(
        Duration::new(d.seconds as u64, d.nanos as u32),
        wait,
        "exact, to the nanosecond"
    );
    assert_eq!(
        st.current_limit.as_ref().map(|l| l.requests_per_unit),
        Some(3)
    );
    assert_eq!(header(&r, "retry-after"), Some("1"));
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some("\"burst\";q=3;w=1, \"sustained\";q=100;w=3600")
    );
    assert_eq!(header(&r, "x-request-id"), Some("req-42"));
    assert_eq!(header(&r, "cache-control"), Some("no-store"));
    assert_eq!(header(&r, "content-type"), Some("application/problem+json"));
    let body: serde_json::Value = serde_json::from_slice(&r.raw_body).unwrap();
    assert_eq!(body["status"], 429);
    assert_eq!(body["code"], "rate_limited");
    assert_eq!(body["type"], "https://errors.example.com/rate-limited");
    assert_eq!(body["request_id"], "req-42");
    assert_eq!(body["retry_after"], 1);
    // Retrying after exactly that wait is admitted.
    s.clock.increment(wait);
    assert_eq!(
        ask(&mut s, req("edge", vec![alice("read")], 0))
            .await
            .overall_code,
        OK
    );
    s.stop().await;
}

#[tokio::test]
async fn a_descriptor_entry_can_carry_the_request_id() {
    let mut s = start(PROFILE).await;
    let with_id = || {
        desc(&[
            ("tenant", "acme"),
            ("user", "alice"),
            ("class", "write"),
            ("x-request-id", "0c803cab-9ad3-4d33-83f9-a98b875c3b08"),
        ])
    };
    for _ in 0..2 {
        assert_eq!(
            ask(&mut s, req("edge", vec![with_id()], 0))
                .await
                .overall_code,
            OK
        );
    }
    let r = ask(&mut s, req("edge", vec![with_id()], 0)).await;
    assert_eq!(
        r.overall_code, OVER_LIMIT,
        "the extra entry changes nothing of the key"
    );
    assert_eq!(
        header(&r, "x-request-id"),
        Some("0c803cab-9ad3-4d33-83f9-a98b875c3b08")
    );
    s.stop().await;
}

#[tokio::test]
async fn a_request_id_that_is_not_one_is_replaced() {
    let mut s = start(PROFILE).await;
    for _ in 0..2 {
        ask(&mut s, req("edge", vec![alice("write")], 0)).await;
    }
    let mut request = tonic::Request::new(req("edge", vec![alice("write")], 0));
    request
        .metadata_mut()
        .insert("x-request-id", "has spaces and <html>".parse().unwrap());
    let r = s
        .client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner();
    let id = header(&r, "x-request-id").unwrap();
    assert_eq!(id.len(), 32, "a generated id: {id}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    s.stop().await;
}

#[tokio::test]
async fn current_limit_is_left_out_where_envoy_has_no_unit() {
    let mut s = start(PROFILE).await;
    for _ in 0..2 {
        assert_eq!(
            ask(&mut s, req("edge", vec![alice("odd")], 0))
                .await
                .overall_code,
            OK
        );
    }
    let r = ask(&mut s, req("edge", vec![alice("odd")], 0)).await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    assert_eq!(r.statuses[0].current_limit, None, "1500ms is no Envoy unit");
    assert!(r.statuses[0].duration_until_reset.is_some());
    // `w` of RateLimit-Policy rounds the window up: never more than allowed.
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some("\"burst\";q=2;w=2, \"sustained\";q=10;w=90")
    );
    s.stop().await;
}

#[tokio::test]
async fn limit_remaining_is_sent_only_when_the_profile_exposes_it() {
    let yaml = PROFILE.replace(
        "name: rls-test\n",
        "name: rls-test\nexpose_remaining: true\n",
    );
    let mut s = start(&yaml).await;
    let r = ask(&mut s, req("edge", vec![alice("read")], 0)).await;
    assert_eq!(r.statuses[0].limit_remaining, 2, "3 - 1, the caller's own");
    ask(&mut s, req("edge", vec![alice("read")], 0)).await;
    let r = ask(&mut s, req("edge", vec![alice("read")], 0)).await;
    assert_eq!(r.statuses[0].limit_remaining, 0);
    s.stop().await;
}

#[tokio::test]
async fn shared_capacity_refusals_are_unavailable() {
    let yaml = PROFILE.replace(
        "catalog:",
        "shared_capacity: { shards: 1, window: 1s, slots_per_window: 4, tenant_share: 1 }\ncatalog:",
    );
    let mut s = start(&yaml).await;
    let user = |u: &str| desc(&[("tenant", "acme"), ("user", u), ("class", "read")]);
    for i in 0..4 {
        let r = ask(&mut s, req("edge", vec![user(&format!("u{i}"))], 0)).await;
        assert_eq!(r.overall_code, OK);
    }
    let e = refused(&mut s, req("edge", vec![user("u9")], 0)).await;
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert_eq!(e.message(), "over_capacity");
    // The next window admits again.
    s.clock.increment(Duration::from_secs(1));
    assert_eq!(
        ask(&mut s, req("edge", vec![user("u9")], 0))
            .await
            .overall_code,
        OK
    );
    s.stop().await;
}

#[tokio::test]
async fn nothing_of_another_tenant_is_in_a_refusal() {
    let mut s = start(PROFILE).await;
    // globex uses its bucket; acme is refused; acme's answers never name globex.
    let globex = desc(&[
        ("tenant", "globex-secret"),
        ("user", "mallory-secret"),
        ("class", "write"),
    ]);
    let mut bytes = Vec::new();
    for _ in 0..5 {
        ask(&mut s, req("edge", vec![globex.clone()], 0)).await;
        let r = ask(&mut s, req("edge", vec![alice("write")], 0)).await;
        bytes.extend_from_slice(&r.raw_body);
        for h in &r.response_headers_to_add {
            bytes.extend_from_slice(h.key.as_bytes());
            bytes.extend_from_slice(h.value.as_bytes());
        }
        bytes.extend_from_slice(format!("{:?}", r.statuses).as_bytes());
    }
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("rate_limited"), "acme was refused");
    assert!(
        !text.contains("globex") && !text.contains("mallory"),
        "{text}"
    );
    assert!(
        !text.contains("acme") && !text.contains("alice"),
        "not even its own ids"
    );
    s.stop().await;
}
