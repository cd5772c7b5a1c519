"""``RedisLimiter`` against a real redis-server on loopback (started per test; without one
installed these tests fail, saying how to install it): buckets shared between limiters, the same HTTP answers as the embedded
limiter, and a store that is down refused as 503, never admitted."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

import tollgate
from conftest import PROFILES, free_port

CONTRACT = PROFILES / "contract.yaml"


@pytest.fixture
def redis_url(tmp_path):
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail(
            "the Redis tests need redis-server on PATH: apt-get install redis-server "
            "(Debian/Ubuntu) or brew install redis"
        )
    port = free_port()
    p = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline or p.poll() is not None:
                p.kill()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)
    yield f"redis://127.0.0.1:{port}/0", p
    p.kill()
    p.wait()


def test_limiters_on_one_redis_share_the_buckets(redis_url):
    url, _ = redis_url
    a = tollgate.RedisLimiter.connect(url, CONTRACT)
    b = tollgate.RedisLimiter.connect(url, tollgate.Profile.from_path(CONTRACT))
    write = a.route_class("write")
    assert a.admit("acme", "alice", write).admitted
    assert b.admit("acme", "alice", "write").admitted
    refused = b.admit("acme", "alice", "write")
    assert (refused.status, refused.bucket, refused.retry_after_secs) == (429, "burst", 30)
    assert a.admit("acme", "bob", write).admitted
    assert a.admit_anonymous("192.0.2.1", "write", cost=2).admitted
    assert a.admit_anonymous("192.0.2.77", "write").status == 429
    with pytest.raises(tollgate.UnknownRouteClass):
        b.admit("acme", "alice", write)  # a's handle
    with pytest.raises(tollgate.InvalidKey):
        a.admit("", "alice", write)


def test_redis_answers_are_the_embedded_limiters(redis_url):
    url, _ = redis_url
    shared = tollgate.RedisLimiter.connect(url, CONTRACT)
    local = tollgate.Limiter.from_yaml(CONTRACT)
    for limiter in (shared, local):
        answers = [
            limiter.admit_request("POST", "/v1/items", tenant="acme", principal="alice", request_id=f"r-{i}")
            for i in range(3)
        ]
        assert [a.status for a in answers] == [200, 200, 429]
    redis_refusal = [shared.admit_request("POST", "/v1/register", peer="203.0.113.5", request_id="x") for _ in range(2)][1]
    local_refusal = [local.admit_request("POST", "/v1/register", peer="203.0.113.5", request_id="x") for _ in range(2)][1]
    assert redis_refusal.status == local_refusal.status == 429
    assert redis_refusal.body == local_refusal.body
    assert sorted(redis_refusal.headers) == sorted(local_refusal.headers)
    assert shared.published_limits_json() == local.published_limits_json()


def test_a_store_that_is_down_is_a_503_not_an_admission(redis_url):
    url, server = redis_url
    limiter = tollgate.RedisLimiter.connect(url, CONTRACT)
    assert limiter.admit("acme", "alice", "read").admitted
    server.kill()
    server.wait()
    d = limiter.admit("acme", "alice", "read")
    assert (d.admitted, d.status, d.cause, d.code) == (False, 503, "store_unavailable", "limiter_unavailable")
    status, headers, body = d.refusal("down-1")
    assert status == 503 and b"limiter_unavailable" in body


def test_connecting_to_nothing_raises():
    with pytest.raises(tollgate.TollgateError):
        tollgate.RedisLimiter.connect(f"redis://127.0.0.1:{free_port()}/0", CONTRACT, connect_timeout=0.5)
    with pytest.raises(tollgate.ProfileError):
        tollgate.RedisLimiter.connect("redis://127.0.0.1:1/0", "name: x\n")



def test_the_asgi_middleware_over_redis_shares_the_buckets(redis_url):
    """The ASGI middleware on a ``RedisLimiter`` (its decisions on a worker thread, off the
    event loop) charges the same buckets as another limiter on the store."""
    import asyncio

    import httpx
    from tollgate.asgi import TollgateMiddleware

    url, _ = redis_url
    other = tollgate.RedisLimiter.connect(url, CONTRACT)

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware = TollgateMiddleware(
        app, tollgate.RedisLimiter.connect(url, CONTRACT), lambda scope: ("acme", "alice")
    )

    async def post():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=middleware), base_url="http://t") as c:
            return await c.post("/v1/items")

    assert asyncio.run(post()).status_code == 200
    assert other.admit("acme", "alice", "write").admitted
    refused = asyncio.run(post())
    assert refused.status_code == 429 and refused.headers["retry-after"] == "30"


LEASED = """
name: leased
identities: { capacity: 1024 }
route_classes:
  read:
    burst:     { tokens: 20,   per: 1h }
    sustained: { tokens: 1000, per: 1h }
    lease:     { max_tokens: 8, ttl: 10s }
"""


def test_leases_go_back_and_the_other_worker_gets_exactly_the_rest(redis_url):
    """A worker's unspent lease goes back with ``return_leases``: after it, a second worker
    admits exactly what the first did not spend, never more."""
    url, _ = redis_url
    a = tollgate.RedisLimiter.connect(url, LEASED)
    b = tollgate.RedisLimiter.connect(url, LEASED, deny_cache=64, redis_module=False)
    assert all(a.admit("acme", "alice", "read").admitted for _ in range(3))
    assert a.return_leases() > 0
    assert a.return_leases() == 0
    admitted = 0
    while b.admit("acme", "alice", "read").admitted:
        admitted += 1
        assert admitted <= 20
    assert admitted == 17
    refused = b.admit("acme", "alice", "read")
    assert (refused.status, refused.bucket) == (429, "burst")
    with pytest.raises(OverflowError):
        tollgate.RedisLimiter.connect(url, LEASED, deny_cache=-1)
