"""The middleware's answers against the demo gateway's, for the same profile and the same
requests: status, headers and body byte for byte, ignoring only what each server adds of its
own (``date``, ``server``)."""

from __future__ import annotations

import json

import httpx
import pytest

OWN_HEADERS = {"date", "server"}
RATE_LIMIT_HEADERS = {"x-request-id", "ratelimit-policy", "ratelimit", "retry-after", "cache-control"}

ALICE = {"Authorization": "Bearer acme-alice-token"}
BOB = {"Authorization": "Bearer acme-bob-token"}
CAROL = {"Authorization": "Bearer globex-carol-token"}


def headers_of(response: httpx.Response, only=None) -> list:
    pairs = [(k.decode().lower(), v.decode()) for k, v in response.headers.raw]
    if only is not None:
        return sorted(p for p in pairs if p[0] in only)
    return sorted(p for p in pairs if p[0] not in OWN_HEADERS)


def assert_same_answer(ours: httpx.Response, theirs: httpx.Response) -> None:
    assert ours.status_code == theirs.status_code
    if ours.status_code in (429, 503):
        assert ours.content == theirs.content
        assert headers_of(ours) == headers_of(theirs)
    else:
        assert headers_of(ours, RATE_LIMIT_HEADERS) == headers_of(theirs, RATE_LIMIT_HEADERS)


def run(client: httpx.Client, base: str, requests: list) -> list:
    return [client.request(method, base + path, headers=headers) for method, path, headers in requests]


def with_id(headers: dict, n: int) -> dict:
    return {**headers, "X-Request-Id": f"contract-{n}"}


@pytest.mark.parametrize("kind", ["fastapi", "flask"])
def test_throttles_match_the_gateway_byte_for_byte(servers, client, kind):
    gateway, ours = servers("gateway"), servers(kind)
    requests = (
        [("POST", "/v1/items", with_id(ALICE, i)) for i in range(3)]
        + [("GET", "/v1/items?page=2", with_id({}, 10 + i)) for i in range(6)]
        + [("POST", "/v1/reports/run", with_id(BOB, 20 + i)) for i in range(3)]
        + [("POST", "/v1/register", with_id(CAROL, 30 + i)) for i in range(2)]
    )
    theirs = run(client, gateway.url, requests)
    mine = run(client, ours.url, requests)
    assert [r.status_code for r in theirs] == [201, 201, 429] + [200] * 5 + [429] + [202, 202, 429] + [201, 429]
    for a, b in zip(mine, theirs):
        assert_same_answer(a, b)
    refusal = mine[2]
    assert refusal.headers["retry-after"] == "30"
    assert refusal.headers["content-type"] == "application/problem+json"
    body = refusal.json()
    assert body["code"] == "rate_limited" and body["request_id"] == "contract-2"
    assert mine[8].headers["retry-after"] == "1"


@pytest.mark.parametrize("kind", ["fastapi", "flask"])
def test_capacity_refusals_match_the_gateway_byte_for_byte(servers, client, kind):
    gateway, ours = servers("gateway", "capacity"), servers(kind, "capacity")
    requests = [("GET", "/v1/items", with_id(ALICE if i % 2 else BOB, i)) for i in range(3)]
    requests += [("POST", "/v1/items", with_id(CAROL, 9))]
    theirs = run(client, gateway.url, requests)
    mine = run(client, ours.url, requests)
    assert [r.status_code for r in theirs] == [200, 200, 503, 201]
    for a, b in zip(mine, theirs):
        assert_same_answer(a, b)
    body = mine[2].json()
    assert body["status"] == 503 and body["code"] == "over_capacity"
    assert mine[2].headers["retry-after"] == "30"


@pytest.mark.parametrize("kind", ["fastapi", "flask"])
def test_discovery_document_is_the_gateways(servers, client, kind):
    gateway, ours = servers("gateway", "capacity"), servers(kind, "capacity")
    theirs = client.get(gateway.url + "/.well-known/rate-limits")
    mine = client.get(ours.url + "/.well-known/rate-limits")
    assert mine.status_code == theirs.status_code == 200
    assert mine.headers["content-type"] == theirs.headers["content-type"]
    assert mine.content == theirs.content
    assert "acme" not in mine.text and "globex" not in mine.text


@pytest.mark.parametrize("kind", ["fastapi", "flask"])
def test_a_malformed_request_id_is_replaced_as_the_gateway_does(servers, client, kind):
    gateway, ours = servers("gateway"), servers(kind)
    bad = {"X-Request-Id": "not a valid id " + "x" * 300}
    for server in (gateway, ours):
        r = client.get(server.url + "/v1/items", headers=bad)
        assert r.status_code == 200
        assert r.headers["x-request-id"] != bad["X-Request-Id"]
        assert len(r.headers["x-request-id"]) == len(client.get(gateway.url + "/v1/items").headers["x-request-id"])


@pytest.mark.parametrize("kind", ["fastapi", "flask"])
def test_no_answer_names_another_tenant_or_principal(servers, client, kind):
    ours = servers(kind, "capacity")
    callers = {("acme", "alice"): ALICE, ("acme", "bob"): BOB, ("globex", "carol"): CAROL}
    for (tenant, principal), headers in callers.items():
        others = {name for who in callers if who[0] != tenant for name in who}
        others |= {who[1] for who in callers if who[1] != principal and who[0] != tenant}
        for _ in range(4):
            for method in ("GET", "POST"):
                r = client.request(method, ours.url + "/v1/items", headers=headers)
                text = r.text + json.dumps(list(r.headers.items()))
                assert r.status_code in (200, 201, 503)
                for name in others:
                    assert name not in text
