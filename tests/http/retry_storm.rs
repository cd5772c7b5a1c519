//! A retry storm on loopback (bounded: 100 clients, 5 s deadline): the SDK's shared retry budget
//! caps amplification, it honours Retry-After instead of hammering, and more requests
//! eventually succeed than with a client that retries at once.

use crate::storm;

use std::time::Duration;

use tollgate::Profile;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_caps_amplification_and_recovers_more() {
    let profile = Profile::from_path("examples/profiles/example.yaml").unwrap();
    let run = |sdk| {
        let profile = profile.clone();
        async move {
            let addr = storm::start_gateway(profile).await;
            let s = storm::Storm {
                clients: 100,
                sdk,
                max_attempts: 10,
                deadline: Duration::from_secs(5),
            };
            tokio::time::timeout(Duration::from_secs(30), storm::run(addr, s))
                .await
                .expect("bounded")
        }
    };
    let naive = run(false).await;
    let sdk = run(true).await;
    eprintln!("{}", storm::table(&[("naive", &naive), ("sdk", &sdk)]));

    for r in [&naive, &sdk] {
        let abandoned: u64 = r.abandoned.iter().map(|(_, n)| n).sum();
        assert_eq!(
            r.succeeded + abandoned,
            r.logical,
            "every logical request ends one way"
        );
        assert!(r.succeeded >= 50, "the burst admits at least 50: {r:?}");
    }
    // The budget (Finagle's defaults: 20% of requests plus 10 a second over a 10 s window)
    // bounds the retries, whatever the server answers.
    assert!(sdk.attempts <= 100 + 20 + 100, "{sdk:?}");
    assert!(
        sdk.amplification() < naive.amplification(),
        "{sdk:?} vs {naive:?}"
    );
    // Waiting Retry-After lets the bucket refill: more requests get through in the end.
    assert!(sdk.succeeded > naive.succeeded, "{sdk:?} vs {naive:?}");
    assert!(sdk.elapsed < Duration::from_secs(8), "{sdk:?}");
}
