//! The server's own counters, beside the engine's `tollgate_decisions_total`: requests by
//! result, and requests for a domain the profile does not serve. No label carries a tenant,
//! a principal or a descriptor value.

/// `tollgate_server_requests_total{result}`: `ok`, `over_limit`, `unavailable`, `invalid`,
/// `unknown_domain` (refused), `unmatched` (refused).
pub const REQUESTS: &str = "tollgate_server_requests_total";
/// `tollgate_server_unknown_domain_total`: requests for another domain, answered or refused.
pub const UNKNOWN_DOMAIN: &str = "tollgate_server_unknown_domain_total";
/// `tollgate_server_reloads_total{result}`: `ok` or `refused`.
pub const RELOADS: &str = "tollgate_server_reloads_total";

pub(crate) fn request(result: &'static str) {
    metrics::counter!(REQUESTS, "result" => result).increment(1);
}

pub(crate) fn unknown_domain() {
    metrics::counter!(UNKNOWN_DOMAIN).increment(1);
}

pub(crate) fn reload(ok: bool) {
    metrics::counter!(RELOADS, "result" => if ok { "ok" } else { "refused" }).increment(1);
}
