//! `GET` / `PUT /admin/profile` on the HTTP side: the token, refusals that keep the old
//! profile (with line and column), and a valid profile in force for the next request.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::*;
use tollgate_server::admin::FollowingFleet;

const TOKEN: &str = "an-admin-token-for-the-tests";

async fn admin_server() -> Server {
    let path = profile_file(PROFILE);
    let (clock, mock) = quanta::Clock::mock();
    let profile = Profile::from_path(&path).unwrap();
    let backend = Limiter::builder(profile).clock(clock).build().unwrap();
    start_on(path, Arc::new(backend), mock, Some(TOKEN)).await
}

/// `method /admin/profile` with `token` (if any) and `body`: status, `ETag`, body.
async fn call(
    s: &Server,
    method: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Option<String>, String) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{}/admin/profile", s.http));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let etag = resp
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, etag, String::from_utf8_lossy(&bytes).into_owned())
}

async fn bob_read(s: &mut Server) -> i32 {
    let bob = desc(&[("tenant", "acme"), ("user", "bob"), ("class", "read")]);
    ask(s, req("edge", vec![bob], 1)).await.overall_code
}

#[tokio::test]
async fn refused_without_the_token_or_with_another() {
    let s = admin_server().await;
    for token in [None, Some("not-the-admin-token-at-all")] {
        for method in ["GET", "PUT"] {
            let (status, _, body) = call(&s, method, token, &[], PROFILE).await;
            assert_eq!(status, 401, "{method} {token:?}: {body}");
            assert!(body.contains("\"code\":\"unauthorized\""), "{body}");
        }
    }
    // Nothing changed: the file is the one the server started on.
    assert_eq!(std::fs::read_to_string(&s.profile_path).unwrap(), PROFILE);
    s.stop().await;
}

#[tokio::test]
async fn an_invalid_profile_is_refused_with_line_and_column_and_the_old_stays() {
    let mut s = admin_server().await;
    let (status, before, _) = call(&s, "GET", Some(TOKEN), &[], "").await;
    assert_eq!(status, 200);
    // Line 5: a burst of "three" tokens.
    let bad = PROFILE.replacen("tokens: 3,", "tokens: three,", 1);
    let (status, _, body) = call(&s, "PUT", Some(TOKEN), &[], &bad).await;
    assert_eq!(status, 422, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["code"], "invalid_profile");
    assert_eq!(body["line"], 5, "{body}");
    assert!(body["column"].as_u64().unwrap() > 0, "{body}");
    // A valid profile that changes what a reload may not change: 409.
    let resized = PROFILE.replacen("capacity: 4096", "capacity: 8192", 1);
    let (status, _, body) = call(&s, "PUT", Some(TOKEN), &[], &resized).await;
    assert_eq!(status, 409, "{body}");
    // The old profile is in force, and on disk.
    let (_, after, _) = call(&s, "GET", Some(TOKEN), &[], "").await;
    assert_eq!(before, after);
    assert_eq!(std::fs::read_to_string(&s.profile_path).unwrap(), PROFILE);
    for _ in 0..3 {
        assert_eq!(bob_read(&mut s).await, OK);
    }
    s.stop().await;
}

#[tokio::test]
async fn a_valid_put_is_in_force_for_the_next_request_and_saved() {
    let mut s = admin_server().await;
    let (_, etag, _) = call(&s, "GET", Some(TOKEN), &[], "").await;
    let etag = etag.expect("an ETag");
    let one = PROFILE.replacen("tokens: 3, per: 1s", "tokens: 1, per: 1s", 1);
    // If-Match naming another version: 412, nothing changes.
    let (status, _, body) = call(
        &s,
        "PUT",
        Some(TOKEN),
        &[("if-match", "\"0000000000000000\"")],
        &one,
    )
    .await;
    assert_eq!(status, 412, "{body}");
    let (status, _, body) = call(&s, "PUT", Some(TOKEN), &[("if-match", &etag)], &one).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(bob_read(&mut s).await, OK);
    assert_eq!(bob_read(&mut s).await, OVER_LIMIT);
    assert_eq!(std::fs::read_to_string(&s.profile_path).unwrap(), one);
    let (_, _, text) = call(&s, "GET", Some(TOKEN), &[], "").await;
    assert!(text.contains("name: rls-test"), "{text}");
    s.stop().await;
}

/// The admin router alone, answering one request from `peer` (none: served without one).
async fn from_peer(peer: Option<&str>, allow_remote: bool) -> u16 {
    use tower::ServiceExt;
    let profile = Profile::from_yaml(PROFILE).unwrap();
    let limiter =
        Arc::new(RateLimiter::new(Arc::new(Limiter::builder(profile).build().unwrap())).unwrap());
    let admin = Admin::new(limiter, AdminToken::new(TOKEN).unwrap(), None, allow_remote);
    let mut req = axum::http::Request::builder()
        .uri("/admin/profile")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(axum::body::Body::empty())
        .unwrap();
    if let Some(p) = peer {
        let addr: std::net::SocketAddr = p.parse().unwrap();
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(addr));
    }
    let router = tollgate_server::admin::router(Arc::new(admin));
    router.oneshot(req).await.unwrap().status().as_u16()
}

#[tokio::test]
async fn a_peer_off_loopback_is_refused_with_the_token_unless_admin_remote() {
    assert_eq!(from_peer(Some("127.0.0.1:40000"), false).await, 200);
    assert_eq!(from_peer(Some("[::1]:40000"), false).await, 200);
    assert_eq!(from_peer(Some("10.1.2.3:40000"), false).await, 403);
    // No peer address at all: not loopback (fail closed).
    assert_eq!(from_peer(None, false).await, 403);
    assert_eq!(from_peer(Some("10.1.2.3:40000"), true).await, 200);
}

#[tokio::test]
async fn a_server_following_a_fleet_profile_refuses_a_put_and_keeps_its_profile() {
    use tower::ServiceExt;
    let profile = Profile::from_yaml(PROFILE).unwrap();
    let limiter =
        Arc::new(RateLimiter::new(Arc::new(Limiter::builder(profile).build().unwrap())).unwrap());
    let admin = Admin::new(
        Arc::clone(&limiter),
        AdminToken::new(TOKEN).unwrap(),
        None,
        false,
    )
    .following_fleet("edge");
    let router = tollgate_server::admin::router(Arc::new(admin));
    let req = |method: &str, body: &str| {
        let mut r = axum::http::Request::builder()
            .method(method)
            .uri("/admin/profile")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(axum::body::Body::from(body.to_owned()))
            .unwrap();
        r.extensions_mut().insert(axum::extract::ConnectInfo(
            "127.0.0.1:40000".parse::<std::net::SocketAddr>().unwrap(),
        ));
        r
    };
    let before = limiter.profile();
    let changed = PROFILE.replace("rls-test", "rls-changed");
    let r = router.clone().oneshot(req("PUT", &changed)).await.unwrap();
    assert_eq!(r.status().as_u16(), 409);
    let body = r.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("\"code\":\"fleet_profile\""), "{body}");
    assert!(
        body.contains("tollgate-server publish --name edge"),
        "{body}"
    );
    assert_eq!(limiter.profile(), before);
    let r = router.oneshot(req("GET", "")).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
}
