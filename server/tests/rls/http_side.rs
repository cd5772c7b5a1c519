//! The HTTP side: `/healthz`, the discovery document, `/metrics`, and `POST /json` answering
//! as the gRPC service does.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::*;

async fn http(s: &Server, method: &str, path: &str, body: &str) -> (u16, String) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", s.http))
        .header("content-type", "application/json")
        .header("x-request-id", "json-1")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn health_and_discovery() {
    let s = start(PROFILE).await;
    assert_eq!(http(&s, "GET", "/healthz", "").await, (200, "ok\n".into()));
    let (status, doc) = http(&s, "GET", "/.well-known/rate-limits", "").await;
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(doc["profile"], "rls-test");
    assert_eq!(doc["route_classes"][0]["name"], "read");
    s.stop().await;
}

#[tokio::test]
async fn json_answers_like_grpc() {
    let s = start(PROFILE).await;
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"tenant","value":"acme"},{"key":"user","value":"alice"},{"key":"class","value":"write"}]}]}"#;
    for _ in 0..2 {
        let (status, text) = http(&s, "POST", "/json", body).await;
        assert_eq!(status, 200, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["overallCode"], "OK");
        assert_eq!(v["statuses"][0]["currentLimit"]["unit"], "SECOND");
        assert_eq!(v["statuses"][0]["currentLimit"]["requestsPerUnit"], 2);
    }
    let (status, text) = http(&s, "POST", "/json", body).await;
    assert_eq!(status, 429, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["overallCode"], "OVER_LIMIT");
    assert_eq!(v["statuses"][0]["code"], "OVER_LIMIT");
    assert!(v["statuses"][0]["durationUntilReset"]
        .as_str()
        .unwrap()
        .ends_with('s'));
    let headers = v["responseHeadersToAdd"].as_array().unwrap();
    assert!(headers
        .iter()
        .any(|h| h["key"] == "retry-after" && h["value"] == "1"));
    assert!(headers
        .iter()
        .any(|h| h["key"] == "x-request-id" && h["value"] == "json-1"));
    assert!(
        !v["rawBody"].as_str().unwrap().is_empty(),
        "base64 of the problem"
    );
    // The proto's own names are accepted too, and hits as a string: check only, cost 0.
    let check = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"tenant","value":"acme"},{"key":"user","value":"bob"},{"key":"class","value":"write"}],"hits_addend":"0"}]}"#;
    for _ in 0..5 {
        assert_eq!(http(&s, "POST", "/json", check).await.0, 200);
    }
    s.stop().await;
}

#[tokio::test]
async fn json_refusals_say_why() {
    let s = start(PROFILE).await;
    let (status, text) = http(&s, "POST", "/json", "{not json").await;
    assert_eq!(status, 400);
    assert!(text.contains("INVALID_ARGUMENT"), "{text}");
    let (status, text) = http(&s, "POST", "/json", r#"{"domain":"","descriptors":[]}"#).await;
    assert_eq!(
        (status, text.contains("domain is empty")),
        (400, true),
        "{text}"
    );
    let (status, text) = http(&s, "POST", "/json", r#"{"domain":"edge","colour":1}"#).await;
    assert_eq!(
        (status, text.contains("unknown field")),
        (400, true),
        "{text}"
    );
    s.stop().await;
}

#[tokio::test]
async fn metrics_count_requests_and_unknown_domains() {
    let mut s = start(PROFILE).await;
    for _ in 0..3 {
        ask(&mut s, req("not-ours", vec![alice("read")], 0)).await;
    }
    let (status, text) = http(&s, "GET", "/metrics", "").await;
    assert_eq!(status, 200);
    let count = text
        .lines()
        .find(|l| l.starts_with("tollgate_server_unknown_domain_total"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .expect(&text);
    assert!(count >= 3.0, "{count}");
    assert!(
        text.contains("tollgate_server_requests_total{result=\"ok\"}"),
        "{text}"
    );
    s.stop().await;
}
