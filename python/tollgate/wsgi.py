"""WSGI middleware (Flask, Django, any WSGI application).

The same contract as ``tollgate.asgi``: ``Limiter.admit_request`` decides and writes the
answer in Rust; a refusal is the gateway's response byte for byte, an admitted response gets
the rate-limit headers, and ``GET /.well-known/rate-limits`` serves the discovery document.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Tuple, Union

from ._tollgate import Limiter, RedisLimiter, RouteClass, TrustedProxies

Environ = dict
Identity = Optional[Tuple[str, str]]

DISCOVERY_PATH = "/.well-known/rate-limits"

_REASONS = {200: "OK", 429: "Too Many Requests", 503: "Service Unavailable"}


class TollgateWSGIMiddleware:
    """Rate limits a WSGI application with ``limiter``.

    ``identify(environ)`` returns the caller's verified ``(tenant, principal)``, or ``None``
    for an anonymous caller, charged to its network prefix (``REMOTE_ADDR``).
    ``route_class(environ)``, if given, chooses the class instead of the profile's ``routes``
    (``None``: not limited). ``discovery_path`` (``None`` to turn it off) serves the discovery
    document. Behind proxies, ``trusted_proxies`` says whose forwarded-for entries to believe.
    """

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        limiter: Union[Limiter, RedisLimiter],
        identify: Optional[Callable[[Environ], Identity]] = None,
        *,
        route_class: Optional[Callable[[Environ], Union[RouteClass, str, None]]] = None,
        discovery_path: Optional[str] = DISCOVERY_PATH,
        trusted_proxies: Optional[TrustedProxies] = None,
    ) -> None:
        self.app = app
        self.trusted_proxies = trusted_proxies
        self.limiter = limiter
        self.identify = identify
        self.route_class = route_class
        self.discovery_path = discovery_path

    def __call__(self, environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
        if path == self.discovery_path and method in ("GET", "HEAD"):
            body = self.limiter.published_limits_json().encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body if method == "GET" else b""]
        who = self.identify(environ) if self.identify is not None else None
        cls = None
        if self.route_class is not None:
            cls = self.route_class(environ)
            if cls is None:
                return self.app(environ, start_response)
        peer = None if who else environ.get("REMOTE_ADDR") or None
        if peer is not None and self.trusted_proxies is not None:
            # WSGI joins repeated header lines with commas: one value, in order.
            key = "HTTP_" + self.trusted_proxies.header.upper().replace("-", "_")
            value = environ.get(key)
            peer = self.trusted_proxies.client_ip(peer, [value] if value else [])
        answer = self.limiter.admit_request(
            method,
            path,
            tenant=who[0] if who else None,
            principal=who[1] if who else None,
            peer=peer,
            request_id=environ.get("HTTP_X_REQUEST_ID"),
            cls=cls,
        )
        if answer is None:
            return self.app(environ, start_response)
        if not answer.admitted:
            body = answer.body or b""
            status = f"{answer.status} {_REASONS.get(answer.status, '')}".rstrip()
            start_response(status, answer.headers + [("content-length", str(len(body)))])
            return [body]
        extra = answer.headers
        names = {n for n, _ in extra}

        def start_with_headers(status: str, headers: list, exc_info: Any = None) -> Any:
            kept = [(n, v) for n, v in headers if n.lower() not in names]
            return start_response(status, kept + extra, exc_info)

        return self.app(environ, start_with_headers)
