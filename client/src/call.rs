//! One logical request as the retry loop sees it: its method and idempotency key ([`Call`]),
//! and what each attempt is given ([`Attempt`]).

use std::sync::Arc;
use std::time::Duration;

use http::Method;

/// What the request carries for idempotency, resolved once per logical request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum IdempotencyKey {
    /// No key: a non-idempotent method is retried only when the request never left.
    #[default]
    None,
    /// The caller's key, sent on every attempt.
    Given(Arc<str>),
    /// Make a random UUID-v4-style key once for this logical request and reuse it on every
    /// attempt, so the server can deduplicate.
    Generate,
}

/// The parts of a request that decide whether it may be repeated.
#[derive(Clone, Debug)]
pub struct Call {
    pub(crate) method: Method,
    pub(crate) key: IdempotencyKey,
}

impl Call {
    /// A call with `method` and no idempotency key.
    pub fn new(method: Method) -> Self {
        Call {
            method,
            key: IdempotencyKey::None,
        }
    }

    /// Uses the caller's `Idempotency-Key`.
    pub fn idempotency_key(mut self, key: impl Into<Arc<str>>) -> Self {
        self.key = IdempotencyKey::Given(key.into());
        self
    }

    /// Lets the SDK make one key for this logical request.
    pub fn generate_idempotency_key(mut self) -> Self {
        self.key = IdempotencyKey::Generate;
        self
    }

    /// Sets the key choice directly.
    pub fn with_key(mut self, key: IdempotencyKey) -> Self {
        self.key = key;
        self
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.method
    }
}

/// What one attempt gets from the retry loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the first try.
    pub number: u32,
    /// This attempt's time limit: the policy's attempt timeout cut to the time left before the
    /// deadline (`None`: neither is set). The loop enforces it too; pass it to the client so it
    /// can give up cleanly.
    pub timeout: Option<Duration>,
    /// The `Idempotency-Key` to send, the same on every attempt.
    pub idempotency_key: Option<Arc<str>>,
}

/// A random UUID-v4-style string (version and variant bits set) from `rng`.
pub fn new_idempotency_key(rng: &mut fastrand::Rng) -> String {
    let mut b = rng.u128(..).to_be_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{byte:02x}"));
    }
    s
}
