//! The demo gateway's admin routes (`app::admin_router`): refused without the token,
//! with a wrong one and off loopback; an invalid or unreloadable profile is refused with its
//! position and the old one stays in force (and in the file); a valid one is in force from the
//! next request and saved to the file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tollgate::{Limiter, Profile};
use tower::ServiceExt;

use tollgate::http::admin::AdminToken;
use tollgate_gateway::app;

const TOKEN: &str = "s3cret-admin-token-0123456789";

fn profile_text(write_burst: u32, capacity: u32) -> String {
    format!(
        r#"# the admin test's profile
name: admin-test
identities: {{ capacity: {capacity} }}
route_classes:
  read:
    burst:     {{ tokens: 5,  per: 1s }}
    sustained: {{ tokens: 600, per: 1h }}
  write:
    burst:     {{ tokens: {write_burst},  per: 1s }}
    sustained: {{ tokens: 100, per: 1h }}
routes:
  - {{ method: GET,  path: "/v1/**", class: read }}
  - {{ method: "*",  path: "/v1/**", class: write }}
"#
    )
}

struct Fixture {
    limiter: Arc<Limiter>,
    admin: Router,
    public: Router,
    file: PathBuf,
    dir: PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fixture(name: &str, allow_remote: bool) -> Fixture {
    let dir = std::env::temp_dir().join(format!("tollgate-admin-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("profile.yaml");
    std::fs::write(&file, profile_text(1, 64)).unwrap();
    let limiter = Arc::new(
        Limiter::builder(Profile::from_path(&file).unwrap())
            .build()
            .unwrap(),
    );
    let admin = app::admin_router(
        Arc::clone(&limiter),
        AdminToken::new(TOKEN).unwrap(),
        Some(file.clone()),
        allow_remote,
    );
    let public = app::router(Arc::clone(&limiter), app::Tokens::default(), Vec::new());
    Fixture {
        limiter,
        admin,
        public,
        file,
        dir,
    }
}

struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

async fn call(
    router: &Router,
    method: Method,
    path: &str,
    peer: Option<[u8; 4]>,
    auth: Option<&str>,
    body: &str,
) -> Reply {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let mut req = req.body(Body::from(body.to_owned())).unwrap();
    if let Some(ip) = peer {
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
    }
    let res = router.clone().oneshot(req).await.unwrap();
    let (parts, body) = res.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

impl Fixture {
    /// `PUT /admin/profile` with the right token, from loopback: what an operator sends.
    async fn put_profile(&self, body: &str) -> Reply {
        let token = bearer(TOKEN);
        call(
            &self.admin,
            Method::PUT,
            "/admin/profile",
            LOOPBACK,
            Some(&token),
            body,
        )
        .await
    }

    /// The write class's burst in force: which profile the limiter decides under.
    fn write_burst(&self) -> u64 {
        let profile = self.limiter.profile();
        profile.route_class("write").unwrap().burst.tokens.get()
    }
}

const LOOPBACK: Option<[u8; 4]> = Some([127, 0, 0, 1]);
const REMOTE: Option<[u8; 4]> = Some([203, 0, 113, 9]);

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

#[tokio::test]
async fn refused_without_the_token_with_a_wrong_one_and_off_loopback() {
    let f = fixture("refuse", false);
    let get = |peer, auth: Option<String>| {
        let admin = f.admin.clone();
        async move {
            call(
                &admin,
                Method::GET,
                "/admin/profile",
                peer,
                auth.as_deref(),
                "",
            )
            .await
        }
    };
    let none = get(LOOPBACK, None).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        none.headers["www-authenticate"],
        "Bearer realm=\"tollgate-admin\""
    );
    assert_eq!(none.headers["content-type"], "application/problem+json");
    assert_eq!(none.json()["code"], "unauthorized");
    for wrong in [
        "wrong",
        &TOKEN[..TOKEN.len() - 1],
        &format!("{TOKEN}x"),
        &TOKEN.to_uppercase(),
    ] {
        let r = get(LOOPBACK, Some(bearer(wrong))).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{wrong}");
        assert!(r.headers["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("error=\"invalid_token\""));
        assert!(
            !r.body.contains("admin-test"),
            "nothing of the profile leaks"
        );
    }
    // Not a bearer token at all.
    let basic = get(LOOPBACK, Some(format!("Basic {TOKEN}"))).await;
    assert_eq!(basic.status, StatusCode::UNAUTHORIZED);
    // The right token from a remote peer, or with no peer address: refused by default.
    for peer in [REMOTE, None] {
        let r = get(peer, Some(bearer(TOKEN))).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{peer:?}");
        assert_eq!(r.json()["code"], "admin_loopback_only");
    }
    // A PUT is refused the same way, and changes nothing.
    let put = call(
        &f.admin,
        Method::PUT,
        "/admin/profile",
        REMOTE,
        Some(&bearer(TOKEN)),
        &profile_text(3, 64),
    )
    .await;
    assert_eq!(put.status, StatusCode::FORBIDDEN);
    let put = call(
        &f.admin,
        Method::PUT,
        "/admin/profile",
        LOOPBACK,
        Some("Bearer nope"),
        &profile_text(3, 64),
    )
    .await;
    assert_eq!(put.status, StatusCode::UNAUTHORIZED);
    assert_eq!(f.write_burst(), 1);
    // Loopback with the token: the profile in force, as YAML that reads back the same.
    let ok = get(LOOPBACK, Some(bearer(TOKEN))).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(ok.headers["content-type"], "application/yaml");
    assert_eq!(Profile::from_yaml(&ok.body).unwrap(), *f.limiter.profile());

    // `--admin-remote`: remote peers are answered (with the token, still).
    let f = fixture("remote", true);
    let r = call(
        &f.admin,
        Method::GET,
        "/admin/profile",
        REMOTE,
        Some(&bearer(TOKEN)),
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = call(&f.admin, Method::GET, "/admin/profile", REMOTE, None, "").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_invalid_profile_is_refused_with_line_and_column_and_the_old_stays() {
    let f = fixture("invalid", false);
    let before = std::fs::read_to_string(&f.file).unwrap();
    let bad = profile_text(1, 64).replace("tokens: 600", "tokens: 0");
    let r = f.put_profile(&bad).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    let j = r.json();
    assert_eq!(j["code"], "invalid_profile");
    // Line 7 of the body: `    sustained: { tokens: 0, per: 1h }`, the value at column 26.
    assert_eq!(
        (j["line"].as_u64(), j["column"].as_u64()),
        (Some(7), Some(26)),
        "{j}"
    );
    assert!(
        j["detail"]
            .as_str()
            .unwrap()
            .contains("route_classes.read.sustained.tokens"),
        "{j}"
    );
    // Not YAML of a profile at all: still a position.
    let r = f.put_profile("name: x\nidentities: [\n").await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(r.json()["line"].is_u64(), "{}", r.body);
    // Valid, but a reload may not resize the table: 409, no position needed.
    let r = f.put_profile(&profile_text(3, 128)).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert_eq!(r.json()["code"], "reload_refused");
    assert!(r.body.contains("identities.capacity"), "{}", r.body);
    // Not UTF-8.
    let mut req = Request::put("/admin/profile")
        .header("authorization", bearer(TOKEN))
        .body(Body::from(vec![0xff, 0xfe, b'a']))
        .unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))));
    let res = f.admin.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);

    // After every refusal: the old profile in force, the file untouched, no temporary left.
    assert_eq!(f.write_burst(), 1);
    assert_eq!(std::fs::read_to_string(&f.file).unwrap(), before);
    assert_eq!(std::fs::read_dir(&f.dir).unwrap().count(), 1);
    let post = call(&f.public, Method::POST, "/v1/items", LOOPBACK, None, "").await;
    assert_eq!(
        post.headers["ratelimit-policy"],
        "\"burst\";q=1;w=1, \"sustained\";q=100;w=3600"
    );
}

#[tokio::test]
async fn a_valid_profile_is_in_force_from_the_next_request_and_saved() {
    let f = fixture("valid", false);
    let post = || {
        let public = f.public.clone();
        async move { call(&public, Method::POST, "/v1/items", REMOTE, None, "").await }
    };
    assert_eq!(post().await.status, StatusCode::CREATED);
    assert_eq!(post().await.status, StatusCode::TOO_MANY_REQUESTS);

    let new = profile_text(3, 64);
    let r = f.put_profile(&new).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()["in_force"], true);
    assert_eq!(r.json()["saved_to"], f.file.display().to_string());
    // The next request is decided under the new profile: the policy says 3. The bucket state
    // was kept: this caller still owes the one token it took, so 2 of the new 3 are left.
    let next = post().await;
    assert_eq!(
        next.headers["ratelimit-policy"],
        "\"burst\";q=3;w=1, \"sustained\";q=100;w=3600"
    );
    assert_eq!(next.status, StatusCode::CREATED);
    assert_eq!(post().await.status, StatusCode::CREATED);
    assert_eq!(post().await.status, StatusCode::TOO_MANY_REQUESTS);
    // A new caller gets the new burst of 3.
    let other = Some([198, 51, 100, 7]);
    for expected in [201, 201, 201, 429] {
        let r = call(&f.public, Method::POST, "/v1/items", other, None, "").await;
        assert_eq!(r.status.as_u16(), expected);
    }
    // GET shows it; the file holds the body as sent (comments kept), and nothing else.
    let got = call(
        &f.admin,
        Method::GET,
        "/admin/profile",
        LOOPBACK,
        Some(&bearer(TOKEN)),
        "",
    )
    .await;
    assert_eq!(
        Profile::from_yaml(&got.body).unwrap(),
        Profile::from_yaml(&new).unwrap()
    );
    assert_eq!(std::fs::read_to_string(&f.file).unwrap(), new);
    assert_eq!(
        std::fs::read_dir(&f.dir).unwrap().count(),
        1,
        "no temporary left"
    );
    // A reload of the file (what SIGHUP and the watcher do) keeps it.
    app::reload(&*f.limiter, &f.file).unwrap();
    assert_eq!(f.write_burst(), 3);
}

#[tokio::test]
async fn in_memory_admin_leaves_the_file_alone_and_other_methods_are_refused() {
    let f = fixture("memory", false);
    let before = std::fs::read_to_string(&f.file).unwrap();
    let router = app::admin_router(
        Arc::clone(&f.limiter),
        AdminToken::new(TOKEN).unwrap(),
        None,
        false,
    );
    let r = call(
        &router,
        Method::PUT,
        "/admin/profile",
        LOOPBACK,
        Some(&bearer(TOKEN)),
        &profile_text(4, 64),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()["saved_to"], Value::Null);
    assert_eq!(std::fs::read_to_string(&f.file).unwrap(), before);
    assert_eq!(f.write_burst(), 4);
    let r = call(
        &router,
        Method::DELETE,
        "/admin/profile",
        LOOPBACK,
        Some(&bearer(TOKEN)),
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers["allow"], "GET, PUT");
}

#[tokio::test]
async fn if_match_replaces_only_the_profile_that_was_read() {
    let f = fixture("etag", false);
    let auth = bearer(TOKEN);
    let read = || {
        let (admin, auth) = (f.admin.clone(), auth.clone());
        async move {
            let r = call(
                &admin,
                Method::GET,
                "/admin/profile",
                LOOPBACK,
                Some(&auth),
                "",
            )
            .await;
            r.headers["etag"].to_str().unwrap().to_owned()
        }
    };
    let put = |if_match: String, burst: u32| {
        let (admin, auth) = (f.admin.clone(), auth.clone());
        async move {
            let mut req = Request::put("/admin/profile")
                .header("authorization", auth)
                .header("if-match", if_match)
                .body(Body::from(profile_text(burst, 64)))
                .unwrap();
            req.extensions_mut()
                .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))));
            let res = admin.oneshot(req).await.unwrap();
            res.status()
        }
    };
    let first = read().await;
    assert_eq!(first, read().await, "the same profile, the same tag");
    // Operator A writes on what it read; operator B, who read the same, is refused.
    assert_eq!(put(first.clone(), 2).await, StatusCode::OK);
    let second = read().await;
    assert_ne!(second, first);
    assert_eq!(put(first, 5).await, StatusCode::PRECONDITION_FAILED);
    assert_eq!(f.write_burst(), 2);
    assert_eq!(put(second, 5).await, StatusCode::OK);
    assert_eq!(put("*".to_owned(), 6).await, StatusCode::OK);
    assert_eq!(f.write_burst(), 6);
}

#[test]
fn short_or_unprintable_tokens_are_refused_at_start() {
    assert!(AdminToken::new("short").is_err());
    assert!(AdminToken::new("sixteen bytes ok").is_err(), "a space");
    assert!(AdminToken::new("0123456789abcdef").is_ok());
    assert!(!format!("{:?}", AdminToken::new(TOKEN).unwrap()).contains(TOKEN));
}
