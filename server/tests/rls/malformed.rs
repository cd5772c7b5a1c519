//! Malformed requests are refused with `INVALID_ARGUMENT` and a message saying what is wrong,
//! and charge nothing, not even the well-formed descriptors beside the bad one.

use crate::*;

/// Sends `bad` after a well-formed descriptor of alice's; checks the refusal's message.
async fn invalid(s: &mut Server, mut bad: RateLimitRequest, says: &str) {
    bad.descriptors.insert(0, alice("write"));
    let e = refused(s, bad).await;
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains(says),
        "{says:?} not in {:?}",
        e.message()
    );
    assert!(
        e.message().len() < 300,
        "a short message: {}",
        e.message().len()
    );
}

#[tokio::test]
async fn malformed_requests_are_invalid_and_charge_nothing() {
    let mut s = start(PROFILE).await;
    let big = "x".repeat(1 << 20);
    let cases: Vec<(RateLimitRequest, &str)> = vec![
        (req("", vec![], 0), "domain is empty"),
        (req(&"d".repeat(300), vec![], 0), "domain is 300 bytes"),
        (
            req("edge", vec![desc(&[("", "v")])], 0),
            "descriptors[1].entries[0].key is empty",
        ),
        (
            req("edge", vec![desc(&[("tenant", &big), ("user", "u")])], 0),
            "the value is 1048576 bytes",
        ),
        (
            req("edge", vec![desc(&[(&big[..300], "v")])], 0),
            "key is 300 bytes",
        ),
        (
            req(
                "edge",
                vec![RateLimitDescriptor {
                    entries: (0..5000)
                        .map(|i| Entry {
                            key: format!("k{i}"),
                            value: "v".into(),
                        })
                        .collect(),
                    ..Default::default()
                }],
                0,
            ),
            "has 5000 entries, more than the 32 allowed",
        ),
        (
            req("edge", (0..3000).map(|_| desc(&[("k", "v")])).collect(), 0),
            "3001 descriptors, more than the 64 allowed",
        ),
        (
            req("edge", vec![desc(&[])], 0),
            "descriptors[1] has no entries",
        ),
        (
            req(
                "edge",
                vec![desc_hits(&[("k", "v")], u64::from(u32::MAX) + 1)],
                0,
            ),
            "hits_addend 4294967296",
        ),
        (
            req(
                "edge",
                vec![RateLimitDescriptor {
                    is_negative_hits: true,
                    ..desc(&[("k", "v")])
                }],
                0,
            ),
            "is_negative_hits is not supported",
        ),
        (
            req("edge", vec![desc(&[("remote_address", "not-an-ip")])], 0),
            "\"remote_address\" (rule 3) is not an IP address",
        ),
        (
            req("edge", vec![desc(&[("tenant", ""), ("user", "u")])], 0),
            "tenant id is empty",
        ),
        (
            req(
                "edge",
                vec![desc(&[("tenant", "t"), ("user", &"u".repeat(1025))])],
                0,
            ),
            "the value is 1025 bytes",
        ),
    ];
    for (bad, says) in cases {
        invalid(&mut s, bad, says).await;
    }
    // None of those charged alice's write bucket (burst 2).
    for _ in 0..2 {
        assert_eq!(
            ask(&mut s, req("edge", vec![alice("write")], 0))
                .await
                .overall_code,
            OK
        );
    }
    assert_eq!(
        ask(&mut s, req("edge", vec![alice("write")], 0))
            .await
            .overall_code,
        OVER_LIMIT
    );
    s.stop().await;
}

#[tokio::test]
async fn no_descriptors_is_invalid() {
    let mut s = start(PROFILE).await;
    let e = refused(&mut s, req("edge", vec![], 0)).await;
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(e.message(), "no descriptors");
    s.stop().await;
}

#[tokio::test]
async fn a_refusal_never_echoes_an_entry_value() {
    let mut s = start(PROFILE).await;
    let e = refused(
        &mut s,
        req(
            "edge",
            vec![desc(&[("remote_address", "secret-value-123")])],
            0,
        ),
    )
    .await;
    assert!(!e.message().contains("secret-value-123"), "{e:?}");
    let long = format!("secret-{}", "y".repeat(2000));
    let e = refused(
        &mut s,
        req("edge", vec![desc(&[("tenant", &long), ("user", "u")])], 0),
    )
    .await;
    assert!(!e.message().contains("secret-"), "{e:?}");
    s.stop().await;
}
