//! `tollgate::http` routes: the profile's method and path globs, compiled once.

use http::Method;
use tollgate::http::RouteTable;

use crate::layer::limiter;

#[test]
fn globs_match_segments_and_the_first_route_wins() {
    let l = limiter();
    let table = RouteTable::compile(&l.profile(), |n| l.route_class(n));
    let class = |m: Method, p: &str| table.classify(&m, p).map(|e| e.class_name().to_owned());
    assert_eq!(class(Method::GET, "/v1/items").as_deref(), Some("read"));
    assert_eq!(class(Method::GET, "/v1/a/b/c").as_deref(), Some("read"));
    assert_eq!(class(Method::GET, "/v1").as_deref(), Some("read"));
    assert_eq!(
        class(Method::POST, "/v1/things/7/run").as_deref(),
        Some("special")
    );
    // `*` is exactly one segment.
    assert_eq!(
        class(Method::POST, "/v1/things/7/8/run").as_deref(),
        Some("write")
    );
    assert_eq!(
        class(Method::POST, "/v1/things/run").as_deref(),
        Some("write")
    );
    assert_eq!(class(Method::DELETE, "/v1/x").as_deref(), Some("write"));
    assert_eq!(class(Method::GET, "/v2/items"), None);
    assert_eq!(class(Method::GET, "/"), None);
    assert_eq!(class(Method::GET, "/v10/items"), None);
    let write = table.classify(&Method::PUT, "/v1/x").unwrap();
    assert_eq!(
        write.policy(),
        "\"burst\";q=1;w=1, \"sustained\";q=100;w=3600"
    );
}
