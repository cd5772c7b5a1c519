//! `hits_addend`: the request's (0 is 1) and each descriptor's own (0 checks without
//! charging); a cost no bucket holds; and all or nothing across descriptors, with exact
//! refunds of tokens and shard slots.

use crate::*;

fn bob(class: &str) -> RateLimitDescriptor {
    desc(&[("tenant", "acme"), ("user", "bob"), ("class", class)])
}

fn alice_hits(class: &str, hits: u64) -> RateLimitDescriptor {
    desc_hits(
        &[("tenant", "acme"), ("user", "alice"), ("class", class)],
        hits,
    )
}

async fn code(s: &mut Server, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> i32 {
    ask(s, req("edge", descriptors, hits)).await.overall_code
}

#[tokio::test]
async fn the_request_hits_addend_is_each_descriptors_cost() {
    let mut s = start(PROFILE).await;
    // write: burst 2. A cost of 2 empties it at once.
    assert_eq!(code(&mut s, vec![alice("write")], 2).await, OK);
    assert_eq!(code(&mut s, vec![alice("write")], 1).await, OVER_LIMIT);
    // 0 is Envoy's "unset": a cost of 1.
    assert_eq!(code(&mut s, vec![bob("write")], 0).await, OK);
    assert_eq!(code(&mut s, vec![bob("write")], 0).await, OK);
    assert_eq!(code(&mut s, vec![bob("write")], 0).await, OVER_LIMIT);
    s.stop().await;
}

#[tokio::test]
async fn a_descriptor_hits_addend_of_zero_checks_without_charging() {
    let mut s = start(PROFILE).await;
    for _ in 0..10 {
        assert_eq!(code(&mut s, vec![alice_hits("write", 0)], 5).await, OK);
    }
    assert_eq!(code(&mut s, vec![alice("write")], 0).await, OK);
    assert_eq!(code(&mut s, vec![alice("write")], 0).await, OK);
    // Empty now: the check says so, and still charges nothing.
    let r = ask(&mut s, req("edge", vec![alice_hits("write", 0)], 0)).await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    assert!(r.statuses[0].duration_until_reset.is_some());
    s.stop().await;
}

#[tokio::test]
async fn a_descriptor_hits_addend_overrides_the_requests() {
    let mut s = start(PROFILE).await;
    // The request says 5 (more than write holds); the descriptor says 1.
    assert_eq!(code(&mut s, vec![alice_hits("write", 1)], 5).await, OK);
    assert_eq!(code(&mut s, vec![alice_hits("write", 1)], 5).await, OK);
    assert_eq!(
        code(&mut s, vec![alice_hits("write", 1)], 5).await,
        OVER_LIMIT
    );
    s.stop().await;
}

#[tokio::test]
async fn a_cost_no_bucket_holds_is_over_limit_with_no_wait() {
    let mut s = start(PROFILE).await;
    let r = ask(&mut s, req("edge", vec![alice("write")], 3)).await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    let st = &r.statuses[0];
    assert_eq!(st.code, OVER_LIMIT);
    assert_eq!(st.duration_until_reset, None, "no wait would help");
    assert_eq!(
        st.current_limit.as_ref().map(|l| l.requests_per_unit),
        Some(2)
    );
    assert_eq!(header(&r, "retry-after"), None);
    let body: serde_json::Value = serde_json::from_slice(&r.raw_body).unwrap();
    assert_eq!(body["status"], 429);
    assert_eq!(body["code"], "cost_exceeds_limit");
    assert!(body.get("retry_after").is_none(), "{body}");
    // Nothing was charged.
    assert_eq!(code(&mut s, vec![alice("write")], 2).await, OK);
    s.stop().await;
}

#[tokio::test]
async fn descriptors_are_charged_all_or_nothing() {
    let mut s = start(PROFILE).await;
    assert_eq!(
        code(&mut s, vec![bob("write")], 2).await,
        OK,
        "bob's write is empty"
    );
    for _ in 0..5 {
        let r = ask(&mut s, req("edge", vec![alice("write"), bob("write")], 0)).await;
        assert_eq!(r.overall_code, OVER_LIMIT);
        assert_eq!(r.statuses.len(), 2);
        assert_eq!(r.statuses[0].code, OK, "alice's own limit allowed it");
        assert_eq!(r.statuses[0].duration_until_reset, None);
        assert_eq!(r.statuses[1].code, OVER_LIMIT);
        assert!(r.statuses[1].duration_until_reset.is_some());
    }
    // Every token alice's descriptor took was given back.
    assert_eq!(code(&mut s, vec![alice("write")], 2).await, OK);
    s.stop().await;
}

#[tokio::test]
async fn shard_slots_of_a_refused_request_are_given_back() {
    let yaml = PROFILE.replace(
        "catalog:",
        "shared_capacity: { shards: 1, window: 1s, slots_per_window: 3, tenant_share: 1 }\ncatalog:",
    );
    let mut s = start(&yaml).await;
    let user = |u: &str| desc(&[("tenant", "acme"), ("user", u), ("class", "read")]);
    // Four descriptors need four slots of three: refused, and the three taken given back.
    for _ in 0..3 {
        let e = refused(
            &mut s,
            req("edge", vec![user("a"), user("b"), user("c"), user("d")], 0),
        )
        .await;
        assert_eq!(e.code(), tonic::Code::Unavailable);
    }
    assert_eq!(
        code(&mut s, vec![user("a"), user("b"), user("c")], 0).await,
        OK
    );
    s.stop().await;
}
