//! What the `rls_request` check expects of a response: the statuses it builds for comparison,
//! the response read back as headers and text, and the scan for identities in that text.

use super::*;

/// A descriptor no rule limits, or not reached.
pub(super) fn bare_ok() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..DescriptorStatus::default()
    }
}

/// The status of a descriptor charged to a key of class `class`, reporting bucket `kind`.
pub(super) fn limited(
    code: Code,
    class: usize,
    kind: BucketKind,
    wait: Option<Duration>,
    remaining: u32,
) -> DescriptorStatus {
    let (name, (tokens, unit)) = match kind {
        BucketKind::Burst => (BURST_POLICY, LIMITS[class][0]),
        BucketKind::Sustained => (SUSTAINED_POLICY, LIMITS[class][1]),
    };
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit {
            name: name.to_owned(),
            requests_per_unit: tokens,
            unit: unit as i32,
        }),
        limit_remaining: remaining,
        duration_until_reset: wait.map(|d| PbDuration {
            seconds: d.as_secs() as i64,
            nanos: d.subsec_nanos() as i32,
        }),
        quota: None,
    }
}

pub(super) fn headers_of(resp: &RateLimitResponse) -> Vec<(String, String)> {
    resp.response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

/// Every field of a response as text, the body and raw header values as (lossy) UTF-8.
pub(super) fn response_text(resp: &RateLimitResponse) -> String {
    let mut s = format!("{resp:?}\n{}\n", String::from_utf8_lossy(&resp.raw_body));
    for h in resp
        .response_headers_to_add
        .iter()
        .chain(&resp.request_headers_to_add)
    {
        s += &String::from_utf8_lossy(&h.raw_value);
        s.push('\n');
    }
    s
}

/// `text` names no identity, but where the request itself put that text in an entry key (an
/// error message names keys) or in its request id (echoed on a refusal).
pub(super) fn no_identity(text: &str, req: &RateLimitRequest, own_ids: &[&str]) {
    let run = long_value_run();
    for id in IDENTITIES.iter().copied().chain([run.as_str()]) {
        let excused = own_ids.iter().any(|v| v.contains(id))
            || req.domain.contains(id)
            || req
                .descriptors
                .iter()
                .flat_map(|d| &d.entries)
                .any(|e| e.key.contains(id));
        assert!(
            excused || !text.contains(id),
            "a response carries the identity {id:?}: {text}"
        );
    }
}
