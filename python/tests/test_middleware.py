"""The middleware's options in process (httpx's ASGI and WSGI transports): a coroutine
``identify``, a ``route_class`` resolver, non-HTTP scopes passed through, the handler's own
headers replaced by the rate-limit ones, and the discovery path moved or turned off."""

from __future__ import annotations

import asyncio

import httpx

import tollgate
from tollgate.asgi import TollgateMiddleware
from tollgate.wsgi import TollgateWSGIMiddleware

from conftest import PROFILES


def limiter() -> tollgate.Limiter:
    return tollgate.Limiter.from_yaml(PROFILES / "contract.yaml")


async def asgi_app(scope, receive, send):
    if scope["type"] == "lifespan":
        await receive()
        await send({"type": "lifespan.startup.complete"})
        return
    headers = [(b"x-request-id", b"the-handler's"), (b"content-type", b"text/plain")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


def wsgi_app(environ, start_response):
    start_response("200 OK", [("X-Request-Id", "the-handler's"), ("Content-Type", "text/plain")])
    return [b"ok"]


def test_asgi_identify_may_be_a_coroutine_and_route_class_a_resolver():
    async def identify(scope):
        return ("acme", "alice")

    app = TollgateMiddleware(asgi_app, limiter(), identify, route_class=lambda scope: "registration")

    async def main():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            first = await c.get("/anything", headers={"X-Request-Id": "mine"})
            second = await c.get("/other")
        return first, second

    first, second = asyncio.run(main())
    assert first.status_code == 200 and first.text == "ok"
    assert first.headers.get_list("x-request-id") == ["mine"]
    assert first.headers["ratelimit-policy"] == '"burst";q=1;w=60, "sustained";q=20;w=86400'
    assert second.status_code == 429 and second.headers["retry-after"] == "30"


def test_asgi_passes_lifespan_and_unrouted_requests_through():
    app = TollgateMiddleware(asgi_app, limiter(), discovery_path="/limits")
    messages = []

    async def main():
        queue = [{"type": "lifespan.startup"}]

        async def receive():
            return queue.pop(0)

        async def send(message):
            messages.append(message)

        await app({"type": "lifespan"}, receive, send)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.get("/health"), await c.get("/limits"), await c.get("/.well-known/rate-limits")

    health, limits, old = asyncio.run(main())
    assert messages == [{"type": "lifespan.startup.complete"}]
    assert health.status_code == 200 and "ratelimit-policy" not in health.headers
    assert limits.json()["profile"] == "contract"
    assert old.text == "ok"  # not the discovery path any more: the app's own


def test_wsgi_resolver_and_discovery_off():
    chosen = {"/v1/items": "expensive"}
    app = TollgateWSGIMiddleware(
        wsgi_app, limiter(), lambda environ: None, route_class=lambda e: chosen.get(e["PATH_INFO"]), discovery_path=None
    )
    with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://t") as c:
        answers = [c.get("/v1/items") for _ in range(3)]
        unrouted = c.get("/v1/other")
        discovery = c.get("/.well-known/rate-limits")
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[0].headers.get_list("x-request-id") != ["the-handler's"]
    assert answers[2].headers["content-type"] == "application/problem+json"
    assert unrouted.status_code == 200 and "ratelimit-policy" not in unrouted.headers
    assert discovery.text == "ok"
