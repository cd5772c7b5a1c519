"""Reloads of a serving limiter while requests are in flight: every answer is a whole answer
of one profile or the other, a bad profile is refused with its line and column, and the last
profile is the one in force."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from conftest import PROFILES

CONTRACT = (PROFILES / "contract.yaml").read_text()
POLICIES = {'"burst";q=5;w=1, "sustained";q=6000;w=3600', '"burst";q=7;w=1, "sustained";q=6000;w=3600'}


@pytest.mark.parametrize("kind", ["fastapi", "flask"])
def test_reload_under_concurrent_requests(servers, kind):
    server = servers(kind)
    wider = CONTRACT.replace("tokens: 5,    per: 1s", "tokens: 7,    per: 1s")
    assert wider != CONTRACT
    stop = threading.Event()

    def hammer(n: int) -> list:
        answers = []
        with httpx.Client(base_url=server.url, timeout=10) as c:
            for i in range(150):
                if stop.is_set():
                    break
                r = c.get("/v1/items", headers={"Authorization": "Bearer acme-alice-token", "X-Request-Id": f"h{n}-{i}"})
                answers.append(r)
        return answers

    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(hammer, n) for n in range(4)]
        with httpx.Client(base_url=server.url, timeout=10) as admin:
            for i in range(20):
                r = admin.post("/test/reload", content=wider if i % 2 == 0 else CONTRACT)
                assert r.status_code == 200, r.text
            bad = admin.post("/test/reload", content=CONTRACT.replace("per: 1s }", "per: 1 }", 1))
            assert bad.status_code == 400
            error = bad.json()
            assert (error["line"], error["column"]) == (7, 37)
            assert "line 7 column 37" in error["error"]
            assert admin.post("/test/reload", content=wider).status_code == 200
        stop.set()
        answers = [r for f in running for r in f.result()]

    assert answers
    for r in answers:
        assert r.status_code in (200, 429)
        assert r.headers["ratelimit-policy"] in POLICIES
        if r.status_code == 429:
            body = r.json()
            assert body["code"] == "rate_limited" and body["request_id"] == r.headers["x-request-id"]
            assert r.headers["retry-after"] == "1"
    with httpx.Client(base_url=server.url, timeout=10) as c:
        doc = c.get("/.well-known/rate-limits").json()
    read = next(cl for cl in doc["route_classes"] if cl["name"] == "read")
    assert read["burst"] == {"tokens": 7, "per": "1s"}
