"""tollgate: an admission engine for HTTP APIs, from Python.

``Limiter.admit`` decides one request in the Rust engine (lock-free token buckets, exact
Retry-After, 429 for the caller's own quota, 503 for shared capacity); ``Limiter.admit_request``
also writes the HTTP answer (status, rate-limit headers, RFC 9457 problem body) with the same
Rust code as tollgate's tower layer and demo gateway. ``tollgate.asgi`` and ``tollgate.wsgi``
put it in front of an application (``RedisLimiter`` shares the buckets between processes); ``tollgate.httpx`` retries as a well-behaved client.
"""

from ._tollgate import (
    Backoff,
    Decision,
    HttpAnswer,
    InvalidCost,
    InvalidKey,
    Limiter,
    Pinned,
    Profile,
    ProfileError,
    RedisLimiter,
    RetryBudget,
    RetryOutcome,
    RetryPolicy,
    RouteClass,
    SnapshotError,
    TollgateError,
    TrustedProxies,
    UnknownRouteClass,
    is_idempotent,
    parse_retry_after,
)

__all__ = [
    "Backoff",
    "Decision",
    "HttpAnswer",
    "InvalidCost",
    "InvalidKey",
    "Limiter",
    "Pinned",
    "Profile",
    "ProfileError",
    "RedisLimiter",
    "RetryBudget",
    "RetryOutcome",
    "RetryPolicy",
    "RouteClass",
    "SnapshotError",
    "TollgateError",
    "TrustedProxies",
    "UnknownRouteClass",
    "is_idempotent",
    "parse_retry_after",
]
