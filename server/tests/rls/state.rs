//! `--state`: a quota used up before a restart is still used up after it (the server's
//! `state::open` and checkpoint, as `main.rs` runs them, across two servers in process).

use std::time::Duration;

use tollgate::snapshot::StateFile as State;
use tollgate_ops::state;

use crate::*;

/// One class whose daily quota two requests use up.
const DAILY: &str = "\
name: state-test
identities: { capacity: 4096, tenant_share: 1 }
retry_after: { max: 24h }
route_classes:
  signup:
    burst:     { tokens: 2, per: 1s }
    sustained: { tokens: 2, per: 24h }
descriptors:
  domain: edge
  rules:
    - { tenant: tenant, principal: user, class: signup }
";

const SECRET: &[u8] = b"a stable key secret for the state test";

fn user(name: &str) -> RateLimitDescriptor {
    desc(&[("tenant", "acme"), ("user", name)])
}

/// A server restored from `state` (a first start when its file is missing).
async fn boot(state: &State, secret: &[u8]) -> Result<Server, String> {
    let path = profile_file(DAILY);
    let (clock, mock) = quanta::Clock::mock();
    let builder = Limiter::builder(Profile::from_path(&path).unwrap()).clock(clock);
    let limiter = state::open(builder.key_secret(secret), Some(state))?;
    Ok(start_on(path, Arc::new(limiter), mock, None).await)
}

fn state_file() -> State {
    static N: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "tollgate-server-state-{}-{}.tgsnap",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&path);
    State {
        every: Duration::from_secs(3600),
        ..State::new(path)
    }
}

#[tokio::test]
async fn a_used_up_daily_quota_stays_refused_after_a_restart() {
    let st = state_file();
    let mut s = boot(&st, SECRET).await.unwrap();
    let checkpoint = state::checkpoint(s.limiter.backend(), &st).unwrap();
    assert_eq!(
        ask(&mut s, req("edge", vec![user("alice")], 1))
            .await
            .overall_code,
        OK
    );
    s.clock.increment(Duration::from_secs(2));
    assert_eq!(
        ask(&mut s, req("edge", vec![user("alice")], 1))
            .await
            .overall_code,
        OK
    );
    s.clock.increment(Duration::from_secs(2));
    assert_eq!(
        ask(&mut s, req("edge", vec![user("alice")], 1))
            .await
            .overall_code,
        OVER_LIMIT
    );
    // The shutdown of main.rs: the requests in flight, then the last checkpoint.
    s.stop().await;
    state::finish(checkpoint).unwrap();

    let mut s = boot(&st, SECRET).await.unwrap();
    let r = ask(&mut s, req("edge", vec![user("alice")], 1)).await;
    assert_eq!(r.overall_code, OVER_LIMIT, "{r:?}");
    // The wait is most of a day (one token of 2 per 24h: 12 h, less the seconds that passed).
    let wait: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((11 * 3600..=12 * 3600).contains(&wait), "{wait}");
    // Another caller is not affected.
    let r = ask(&mut s, req("edge", vec![user("bob")], 1)).await;
    assert_eq!(r.overall_code, OK);
    s.stop().await;
    let _ = std::fs::remove_file(&st.path);
}

#[tokio::test]
async fn a_snapshot_under_another_secret_is_refused_unless_told_to_start_empty() {
    let st = state_file();
    let s = boot(&st, SECRET).await.unwrap();
    let checkpoint = state::checkpoint(s.limiter.backend(), &st).unwrap();
    s.stop().await;
    state::finish(checkpoint).unwrap();

    let other = b"another key secret, not the snapshot's";
    let e = boot(&st, other).await.err().expect("refused");
    assert!(e.contains("--state-start-empty-on-refusal"), "{e}");
    let lenient = State {
        start_empty_on_refusal: true,
        ..st.clone()
    };
    let mut s = boot(&lenient, other).await.unwrap();
    let r = ask(&mut s, req("edge", vec![user("alice")], 1)).await;
    assert_eq!(r.overall_code, OK);
    s.stop().await;
    let _ = std::fs::remove_file(&st.path);
}

#[test]
fn state_without_a_key_secret_is_refused() {
    let builder = Limiter::builder(Profile::from_yaml(DAILY).unwrap());
    let e = state::open(builder, Some(&state_file())).err().unwrap();
    assert!(e.contains("TOLLGATE_KEY_SECRET"), "{e}");
}
