//! A request for a domain the profile does not serve: answered OK and counted, or refused.

use crate::*;

#[tokio::test]
async fn an_unknown_domain_is_ok_and_charges_nothing() {
    let mut s = start(PROFILE).await;
    for _ in 0..10 {
        let r = ask(&mut s, req("elsewhere", vec![alice("write")], 0)).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(r.statuses.len(), 1);
        assert_eq!(r.statuses[0].code, OK);
    }
    // Alice's write bucket in the served domain is untouched.
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
async fn an_unknown_domain_is_refused_when_the_profile_says_so() {
    let yaml = PROFILE.replace(
        "  domain: edge\n",
        "  domain: edge\n  unknown_domain: refuse\n",
    );
    let mut s = start(&yaml).await;
    let e = refused(&mut s, req("elsewhere", vec![alice("write")], 0)).await;
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(e.message().contains("domain not served"), "{e:?}");
    assert_eq!(
        ask(&mut s, req("edge", vec![alice("write")], 0))
            .await
            .overall_code,
        OK
    );
    s.stop().await;
}
