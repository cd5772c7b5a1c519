//! The SDK's product token in `User-Agent`: `tollgate-client/VERSION`, appended to the
//! caller's own `User-Agent` (or sent alone), so that a provider can segment its traffic by
//! client SDK version (tollgate's gateway labels `observability.sdk_versions` this way) and
//! tell one version's retry storm from real growth.

use http::header::{HeaderMap, HeaderValue, USER_AGENT};

/// `tollgate-client/VERSION`, this crate's version (`CARGO_PKG_VERSION`).
pub const PRODUCT_TOKEN: &str = concat!("tollgate-client/", env!("CARGO_PKG_VERSION"));

/// `User-Agent` with the SDK's [`PRODUCT_TOKEN`]: the token alone when there is none, else the
/// caller's own value with the token appended (`myapp/2.1 tollgate-client/0.1.0`, RFC 9110
/// lists the most significant product first). A value that already carries the token is kept
/// as it is, so that a retried or re-wrapped request does not grow.
pub fn user_agent(existing: Option<&HeaderValue>) -> HeaderValue {
    let Some(existing) = existing else {
        return HeaderValue::from_static(PRODUCT_TOKEN);
    };
    let bytes = existing.as_bytes();
    let carries = bytes
        .split(|b| b.is_ascii_whitespace())
        .any(|t| t == PRODUCT_TOKEN.as_bytes());
    if carries || bytes.is_empty() {
        return if bytes.is_empty() {
            HeaderValue::from_static(PRODUCT_TOKEN)
        } else {
            existing.clone()
        };
    }
    let mut value = Vec::with_capacity(bytes.len() + 1 + PRODUCT_TOKEN.len());
    value.extend_from_slice(bytes);
    value.push(b' ');
    value.extend_from_slice(PRODUCT_TOKEN.as_bytes());
    // A valid value followed by a space and a token of visible ASCII is a valid value.
    HeaderValue::from_bytes(&value).unwrap_or_else(|_| existing.clone())
}

/// Sets `headers`' `User-Agent` to [`user_agent`] of what is there (the first value; others
/// are dropped, as HTTP allows one `User-Agent`).
pub fn add_product_token(headers: &mut HeaderMap) {
    let value = user_agent(headers.get(USER_AGENT));
    headers.insert(USER_AGENT, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_once_to_the_callers_own() {
        assert_eq!(user_agent(None), PRODUCT_TOKEN);
        assert_eq!(
            user_agent(Some(&HeaderValue::from_static(""))),
            PRODUCT_TOKEN
        );
        let own = HeaderValue::from_static("billing-sync/3.2 (linux)");
        let with = user_agent(Some(&own));
        assert_eq!(
            with,
            format!("billing-sync/3.2 (linux) {PRODUCT_TOKEN}").as_str()
        );
        assert_eq!(user_agent(Some(&with)), with);
        assert!(PRODUCT_TOKEN.starts_with("tollgate-client/"));
    }
}
