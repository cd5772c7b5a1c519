"""ASGI middleware (Starlette, FastAPI, any ASGI 3 application).

Each HTTP request is decided by ``Limiter.admit_request``: the Rust engine picks the route
class from the profile's ``routes`` (or ``route_class`` chooses it), charges the caller, and
writes the answer. A refusal is sent as tollgate's gateway sends it (status, headers, RFC 9457
body, byte for byte); an admitted request goes on to the application, and its response gets the
rate-limit headers. ``GET /.well-known/rate-limits`` serves the discovery document.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, Awaitable, Callable, Optional, Tuple, Union

from ._tollgate import Limiter, RedisLimiter, RouteClass, TrustedProxies

Scope = dict
Identity = Optional[Tuple[str, str]]
Identify = Callable[[Scope], Union[Identity, Awaitable[Identity]]]
ResolveClass = Callable[[Scope], Union[RouteClass, str, None]]

DISCOVERY_PATH = "/.well-known/rate-limits"


def _header(scope: Scope, name: bytes) -> Optional[str]:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def _encode(headers: list) -> list:
    return [(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers]


class TollgateMiddleware:
    """Rate limits an ASGI application with ``limiter``.

    ``identify(scope)`` returns the caller's verified ``(tenant, principal)``, or ``None`` for
    an anonymous caller, charged to its network prefix (``scope["client"]``); it may be a
    coroutine function. ``route_class(scope)``, if given, chooses the class (a ``RouteClass``
    or a name; ``None`` leaves the request unlimited) instead of the profile's ``routes``.
    ``discovery_path`` (``None`` to turn it off) serves the discovery document. Behind proxies,
    ``trusted_proxies`` says whose forwarded-for entries to believe (without it, anonymous
    callers are charged to the connection's peer, which behind a proxy is the proxy).
    """

    def __init__(
        self,
        app: Callable[..., Awaitable[None]],
        limiter: Union[Limiter, RedisLimiter],
        identify: Optional[Identify] = None,
        *,
        route_class: Optional[ResolveClass] = None,
        discovery_path: Optional[str] = DISCOVERY_PATH,
        trusted_proxies: Optional[TrustedProxies] = None,
    ) -> None:
        self.app = app
        self.trusted_proxies = trusted_proxies
        self.limiter = limiter
        self.identify = identify
        self.route_class = route_class
        self.discovery_path = discovery_path

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        path = scope.get("root_path", "") + scope["path"]
        if path == self.discovery_path and method in ("GET", "HEAD"):
            await self._discovery(method, send)
            return
        who: Identity = None
        if self.identify is not None:
            found = self.identify(scope)
            who = await found if inspect.isawaitable(found) else found
        cls = None
        if self.route_class is not None:
            cls = self.route_class(scope)
            if cls is None:
                await self.app(scope, receive, send)
                return
        client = scope.get("client")
        peer = client[0] if client and not who else None
        if peer is not None and self.trusted_proxies is not None:
            name = self.trusted_proxies.header.encode()
            values = [v.decode("latin-1") for n, v in scope.get("headers", ()) if n == name]
            peer = self.trusted_proxies.client_ip(peer, values)
        decide = functools.partial(
            self.limiter.admit_request,
            method,
            path,
            tenant=who[0] if who else None,
            principal=who[1] if who else None,
            peer=peer,
            request_id=_header(scope, b"x-request-id"),
            cls=cls,
        )
        # The embedded engine answers in well under a microsecond, on the loop; Redis after a
        # round trip, on a worker thread, so that the loop keeps serving meanwhile.
        if isinstance(self.limiter, RedisLimiter):
            answer = await asyncio.get_running_loop().run_in_executor(None, decide)
        else:
            answer = decide()
        if answer is None:
            await self.app(scope, receive, send)
            return
        if not answer.admitted:
            body = answer.body or b""
            headers = answer.headers + [("content-length", str(len(body)))]
            await send({"type": "http.response.start", "status": answer.status, "headers": _encode(headers)})
            await send({"type": "http.response.body", "body": body})
            return
        extra = _encode(answer.headers)
        names = {n for n, _ in extra}

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                kept = [(n, v) for n, v in message.get("headers", ()) if n.lower() not in names]
                message = {**message, "headers": kept + extra}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _discovery(self, method: str, send: Any) -> None:
        body = self.limiter.published_limits_json().encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body if method == "GET" else b""})
