//! `--redis`: two servers over one real `redis-server` (started on a free loopback port by the
//! testkit harness) share each caller's bucket; with Redis down, answers are `UNAVAILABLE`.
//! Feature `redis`: `cargo test -p tollgate-server --features redis --test redis`.

use std::sync::Arc;

use tollgate::redis::RedisLimiter;
use tollgate::Profile;
use tollgate_server::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_server::RateLimiter;
use tollgate_testkit::redis_server::RedisServer;

const PROFILE: &str = "\
name: rls-redis
identities: { capacity: 1024 }
route_classes:
  write:
    burst:     { tokens: 2, per: 1h }
    sustained: { tokens: 50, per: 1d }
descriptors:
  domain: edge
  rules:
    - { tenant: tenant, principal: user, class: write }
";

fn alice() -> RateLimitRequest {
    let e = |k: &str, v: &str| Entry {
        key: k.into(),
        value: v.into(),
    };
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![e("tenant", "acme"), e("user", "alice")],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

async fn server(redis: &RedisServer) -> RateLimiter<RedisLimiter> {
    let limiter = RedisLimiter::connect(&redis.url(), Profile::from_yaml(PROFILE).unwrap())
        .await
        .unwrap();
    RateLimiter::new(Arc::new(limiter)).unwrap()
}

#[tokio::test]
async fn two_servers_share_buckets_and_fail_closed() {
    let mut redis = RedisServer::start();
    let (a, b) = (server(&redis).await, server(&redis).await);
    let code = |r: Result<_, tonic::Status>| {
        r.map(|r: tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| r.overall_code)
    };
    assert_eq!(code(a.should_rate_limit(&alice(), None).await).unwrap(), 1);
    assert_eq!(code(b.should_rate_limit(&alice(), None).await).unwrap(), 1);
    // The bucket of 2 is shared: both servers now refuse.
    assert_eq!(code(a.should_rate_limit(&alice(), None).await).unwrap(), 2);
    assert_eq!(code(b.should_rate_limit(&alice(), None).await).unwrap(), 2);
    redis.kill();
    let e = b.should_rate_limit(&alice(), None).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert_eq!(e.message(), "limiter_unavailable");
}

/// `--watch-profile`: the server side of one profile for the fleet.
mod fleet {
    use super::*;

    use std::process::Command;
    use std::time::{Duration, Instant};

    use tollgate::redis::FleetProfile;

    fn watched_profile(burst: u64) -> String {
        PROFILE.replace("tokens: 2, per: 1h", &format!("tokens: {burst}, per: 1h"))
    }

    async fn until(mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(5), "not within 5s");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn burst(s: &RateLimiter<RedisLimiter>) -> u64 {
        s.profile().route_class("write").unwrap().burst.tokens.get()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn servers_follow_the_published_profile_limits_and_rules_together() {
        let redis = RedisServer::start();
        let a = Arc::new(server(&redis).await);
        let b = Arc::new(server(&redis).await);
        let _wa = tollgate_server::fleet::watch(&a, "edge", &[])
            .await
            .unwrap();
        let _wb = tollgate_server::fleet::watch(&b, "edge", &[])
            .await
            .unwrap();
        let fleet = FleetProfile::connect(&redis.url(), "tollgate", "edge")
            .await
            .unwrap();
        assert_eq!(fleet.publish(&watched_profile(5)).await.unwrap(), 1);
        until(|| burst(&a) == 5 && burst(&b) == 5).await;
        assert_eq!(a.backend().published_limits().profile_version, Some(1));
        // The new limit decides: 5 admitted between the two servers, then refusals.
        for i in 0..5 {
            let s = if i % 2 == 0 { &a } else { &b };
            assert_eq!(
                s.should_rate_limit(&alice(), None)
                    .await
                    .unwrap()
                    .overall_code,
                1
            );
        }
        assert_eq!(
            a.should_rate_limit(&alice(), None)
                .await
                .unwrap()
                .overall_code,
            2
        );

        // Valid as a profile, so published, but without descriptor rules a server cannot use
        // it: refused, the version in force stays.
        let no_rules = watched_profile(9);
        let no_rules = &no_rules[..no_rules.find("descriptors:").unwrap()];
        assert_eq!(fleet.publish(no_rules).await.unwrap(), 2);
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(a.backend().profile_version(), Some(1));
        assert_eq!((burst(&a), burst(&b)), (5, 5));
    }

    /// With a public key, whoever can write the fleet key cannot set the servers' limits: an
    /// unsigned version, and one signed by another key, are refused; the publisher's signed
    /// version is put in force. The `fleet-key` and `publish --signing-key-file` commands make
    /// and use the pair.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn servers_with_a_public_key_take_only_signed_profiles() {
        let redis = RedisServer::start();
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate-server"))
            .arg("fleet-key")
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let (secret, public) = (lines[1], lines[3]);
        assert_eq!((secret.len(), public.len()), (64, 64), "{text}");
        let a = Arc::new(server(&redis).await);
        let _w = tollgate_server::fleet::watch(&a, "edge", &[public.to_owned()])
            .await
            .unwrap();
        let fleet = FleetProfile::connect(&redis.url(), "tollgate", "edge")
            .await
            .unwrap();
        // Unsigned: published, refused by the server.
        assert_eq!(fleet.publish(&watched_profile(5)).await.unwrap(), 1);
        // Signed by a key the server does not trust.
        let other = tollgate::redis::FleetSigningKey::generate();
        assert_eq!(
            fleet
                .publish_signed(&watched_profile(6), &other)
                .await
                .unwrap(),
            2
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!((a.backend().profile_version(), burst(&a)), (None, 2));

        // Signed with the pair's secret, by the publish command.
        let dir = std::env::temp_dir().join(format!("tg-fleet-signed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (profile, key) = (dir.join("p.yaml"), dir.join("signing.key"));
        std::fs::write(&profile, watched_profile(7)).unwrap();
        std::fs::write(&key, format!("{secret}\n")).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate-server"))
            .args(["publish", "--redis", &redis.url(), "--profile"])
            .arg(&profile)
            .arg("--signing-key-file")
            .arg(&key)
            .args(["--name", "edge"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("version 3 (signed,"), "{stdout}");
        until(|| burst(&a) == 7).await;
        assert_eq!(a.backend().profile_version(), Some(3));
        // A bad key in the server's flags is refused at start.
        let e = tollgate_server::fleet::watch(&a, "edge", &["00".to_owned()])
            .await
            .unwrap_err();
        assert!(e.contains("--fleet-public-key"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn the_publish_subcommand_validates_then_publishes() {
        let redis = RedisServer::start();
        let dir = std::env::temp_dir().join(format!("tg-fleet-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.yaml");
        std::fs::write(&good, watched_profile(4)).unwrap();
        let bad = dir.join("bad.yaml");
        std::fs::write(
            &bad,
            PROFILE.replace("tokens: 2, per: 1h", "tokens: 0, per: 1h"),
        )
        .unwrap();
        let publish = |path: &std::path::Path, extra: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_tollgate-server"))
                .args(["publish", "--redis", &redis.url(), "--profile"])
                .arg(path)
                .args(extra)
                .output()
                .unwrap()
        };

        let out = publish(&bad, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("line 5 column 26"), "{stderr}");
        assert!(redis.keys().is_empty(), "{:?}", redis.keys());

        // The name defaults to the profile's.
        let out = publish(&good, &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("\"rls-redis\" version 1"), "{stdout}");
        let out = publish(&good, &["--name", "edge"]);
        assert!(String::from_utf8_lossy(&out.stdout).contains("\"edge\" version 1"));
        assert_eq!(publish(&good, &["--name", "edge"]).status.code(), Some(0));
        let fleet = FleetProfile::connect(&redis.url(), "tollgate", "edge")
            .await
            .unwrap();
        let m = fleet.fetch().await.unwrap().unwrap();
        assert_eq!(m.version, 2);
        assert_eq!(
            m.profile.route_class("write").unwrap().burst.tokens.get(),
            4
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
