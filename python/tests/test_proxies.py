"""Anonymous callers behind proxies: ``TrustedProxies`` believes forwarded-for entries only from
trusted networks, read from the right, and the middleware charge the client it finds."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import tollgate
from tollgate.asgi import TollgateMiddleware
from tollgate.wsgi import TollgateWSGIMiddleware

from conftest import PROFILES


def test_the_rightmost_untrusted_address_is_the_client():
    proxies = tollgate.TrustedProxies(["10.0.0.0/8", "127.0.0.1"])
    # From a trusted proxy: the client its entry names; what the client wrote left of it is not
    # believed.
    assert proxies.client_ip("10.1.2.3", ["198.51.100.7"]) == "198.51.100.7"
    assert proxies.client_ip("10.1.2.3", ["6.6.6.6, 198.51.100.7"]) == "198.51.100.7"
    assert proxies.client_ip("127.0.0.1", ["198.51.100.7, 10.9.9.9"]) == "198.51.100.7"
    # From an untrusted peer the header is the peer's own writing: the peer is the client.
    assert proxies.client_ip("203.0.113.4", ["198.51.100.7"]) == "203.0.113.4"
    assert proxies.client_ip("10.1.2.3", []) == "10.1.2.3"
    rfc = tollgate.TrustedProxies(["10.0.0.0/8"], header="Forwarded")
    assert rfc.header == "forwarded"
    assert rfc.client_ip("10.1.2.3", ['for="[2001:db8::1]:4711"']) == "2001:db8::1"


def test_bad_networks_headers_and_peers_are_refused():
    with pytest.raises(ValueError, match="10.0.0.0/99"):
        tollgate.TrustedProxies(["10.0.0.0/99"])
    with pytest.raises(ValueError, match="x-real-ip"):
        tollgate.TrustedProxies(["10.0.0.0/8"], header="x-real-ip")
    with pytest.raises(tollgate.InvalidKey):
        tollgate.TrustedProxies(["10.0.0.0/8"]).client_ip("not an address", [])


async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def wsgi_app(environ, start_response):
    start_response("200 OK", [])
    return [b"ok"]


def statuses(client: httpx.Client, forwarded_for: list) -> list:
    return [client.post("/v1/register", headers={"X-Forwarded-For": f}).status_code for f in forwarded_for]


def test_the_middleware_charge_the_client_behind_a_trusted_proxy():
    """`registration` allows one request per anonymous network: behind the proxy each client
    has its own bucket; without ``trusted_proxies`` every client is the proxy."""
    proxies = tollgate.TrustedProxies(["127.0.0.1"])
    clients = ["198.51.100.1", "198.51.100.1", "203.0.113.9"]

    def asgi(trusted):
        limiter = tollgate.Limiter.from_yaml(PROFILES / "contract.yaml")
        middleware = TollgateMiddleware(app, limiter, trusted_proxies=trusted)

        async def main():
            transport = httpx.ASGITransport(app=middleware, client=("127.0.0.1", 5000))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                return [
                    (await c.post("/v1/register", headers={"X-Forwarded-For": f})).status_code
                    for f in clients
                ]

        return asyncio.run(main())

    def wsgi(trusted):
        limiter = tollgate.Limiter.from_yaml(PROFILES / "contract.yaml")
        middleware = TollgateWSGIMiddleware(wsgi_app, limiter, trusted_proxies=trusted)
        transport = httpx.WSGITransport(app=middleware, remote_addr="127.0.0.1")
        with httpx.Client(transport=transport, base_url="http://t") as c:
            return statuses(c, clients)

    for run in (asgi, wsgi):
        assert run(proxies) == [200, 429, 200], run.__name__
        assert run(None) == [200, 429, 429], run.__name__
