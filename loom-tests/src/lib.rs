//! The set-up every model in `tests/` shares: a profile with the one route class `c`, a
//! limiter on quanta's mock clock with a fixed key secret (so an identity's home is the same in
//! every run), a key on `c`, and the answer of a full table. The models themselves are in
//! `tests/`.
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use tollgate::quanta::{Clock, Mock};
use tollgate::{Cause, Decision, Key, Limiter, Profile, Refused};

/// The sustained bucket of most models: large enough never to be the one that refuses.
pub const SUSTAINED: &str = "{ tokens: 100, per: 1s }";

/// A refusal because the identity's window has no slot for it.
pub const TABLE_FULL: Decision = Decision::Unavailable {
    retry_after: None,
    cause: Cause::TableFull,
};

/// A profile of `capacity` identity slots, `tenant_share` of them a tenant's cap, and the one
/// route class `c` with the buckets `burst` and `sustained`, each written as the profile writes
/// a bucket (`"{ tokens: 2, per: 2s }"`).
pub fn profile(capacity: u32, tenant_share: f64, burst: &str, sustained: &str) -> Profile {
    Profile::from_yaml(&format!(
        "name: loom\nidentities: {{ capacity: {capacity}, tenant_share: {tenant_share} }}\n\
         route_classes:\n  c:\n    burst: {burst}\n    sustained: {sustained}\n"
    ))
    .unwrap()
}

/// A bucket of `tokens` per `per` (`"1s"`), as the profile writes it.
pub fn bucket(tokens: u32, per: &str) -> String {
    format!("{{ tokens: {tokens}, per: {per} }}")
}

/// A limiter of `p` on a mock clock (frozen at 0 until the model moves it) with the models'
/// key secret, shared as the models' threads share it.
pub fn limiter(p: &Profile) -> (Arc<Limiter>, std::sync::Arc<Mock>) {
    let (clock, mock) = Clock::mock();
    let l = Limiter::builder(p.clone())
        .clock(clock)
        .key_secret(b"loom")
        .build()
        .unwrap();
    (Arc::new(l), mock)
}

/// The key of principal `who` of `tenant` on class `c`.
pub fn key<'a>(l: &Limiter, tenant: &'a str, who: &'a str) -> Key<'a> {
    Key::authenticated(tenant, who, l.route_class("c").unwrap()).unwrap()
}

/// `admit_all` of `n` tokens of `who`, then of `above` tokens, a cost above the class's burst
/// (refused `Exceeds` before any table is touched), which refunds the first charge exactly:
/// `who` takes a slot (or finds its own) and leaves it with the TATs it had, full if it was
/// new. The refusal says which item was refused (`index: 0`, `TableFull`: no slot for `who`).
pub fn charge_and_refund(
    l: &Limiter,
    tenant: &str,
    who: &str,
    n: u32,
    above: u32,
) -> Result<(), Refused> {
    let k = key(l, tenant, who);
    l.admit_all(&[(k, n), (k, above)])
}
