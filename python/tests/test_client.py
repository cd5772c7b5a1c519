"""The client side: Retry-After parsing, the retry budget, backoff, and the httpx transport
on the Rust retry loop, against an in-memory transport and against a real server."""

from __future__ import annotations

import httpx
import pytest

from tollgate import Backoff, RetryBudget, RetryPolicy, is_idempotent, parse_retry_after
from tollgate.httpx import AsyncRetryTransport, RetryTransport

NOW = 784_111_777 - 60  # a minute before Sun, 06 Nov 1994 08:49:37 GMT


@pytest.mark.parametrize(
    "value, wait",
    [
        ("60", 60.0),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 60.0),
        ("Sunday, 06-Nov-94 08:49:37 GMT", 60.0),
        ("Sun Nov  6 08:49:37 1994", 60.0),
        ("1.5", None),
        ("", None),
        ("-1", None),
    ],
)
def test_parse_retry_after_reads_both_forms(value, wait):
    assert parse_retry_after(value, now=NOW) == wait


def test_a_date_is_measured_from_the_responses_own_date():
    server_date = "Sun, 06 Nov 1994 08:49:36 GMT"
    slow_client = 784_111_776 - 30
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", date=server_date, now=slow_client) == 1.0


def test_the_budget_allows_its_floor_then_its_ratio():
    budget = RetryBudget(ttl=10.0, min_per_sec=0, ratio=0.5)
    assert not budget.try_withdraw()
    budget.deposit()
    budget.deposit()
    assert budget.available == 1
    assert budget.try_withdraw()
    assert not budget.try_withdraw()
    with pytest.raises(ValueError, match="ttl"):
        RetryBudget(ttl=-1.0)


def test_backoff_is_capped_and_jittered_below_the_exponential():
    b = Backoff(0.1, 1.0, floor=0.0, seed=7)
    assert [b.exponential(r) for r in range(5)] == [0.1, 0.2, 0.4, 0.8, 1.0]
    assert all(0.0 <= b.delay(r) <= b.exponential(r) for r in range(20))
    assert Backoff(0.1, 1.0, jitter="none").delay(3) == 0.8
    with pytest.raises(ValueError, match="jitter"):
        Backoff(jitter="some")


def test_idempotent_methods():
    assert [m for m in ("GET", "PUT", "DELETE", "POST", "PATCH") if is_idempotent(m)] == ["GET", "PUT", "DELETE"]


class Script:
    """An in-memory server answering a fixed list of responses, counting requests."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.seen = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, headers = answer
        return httpx.Response(status, headers=headers, content=b"{}")


def client_for(script, **policy) -> httpx.Client:
    policy.setdefault("backoff", Backoff(0.001, 0.01, floor=0.0))
    transport = RetryTransport(httpx.MockTransport(script), policy=RetryPolicy(**policy))
    return httpx.Client(transport=transport, base_url="http://test")


def test_a_throttle_is_retried_after_its_retry_after():
    script = Script((429, {"Retry-After": "1"}), (200, {}))
    r = client_for(script).get("/")
    assert r.status_code == 200
    assert r.extensions["tollgate.attempts"] == 2 and r.extensions["tollgate.give_up"] is None


def test_a_wait_above_max_wait_returns_the_refusal_at_once():
    script = Script((429, {"Retry-After": "120"}), (200, {}))
    r = client_for(script, max_wait=5.0).get("/")
    assert r.status_code == 429 and r.extensions["tollgate.give_up"] == "wait_too_long"
    assert len(script.seen) == 1


def test_a_post_without_an_idempotency_key_is_not_repeated():
    script = Script((503, {}), (201, {}))
    r = client_for(script).post("/", content=b"x")
    assert r.status_code == 503 and r.extensions["tollgate.give_up"] == "non_retryable"
    keyed = Script((503, {}), (201, {}))
    r = client_for(keyed).post("/", content=b"x", headers={"Idempotency-Key": "k-1"})
    assert r.status_code == 201 and [q.content for q in keyed.seen] == [b"x", b"x"]


def test_attempts_and_the_budget_bound_the_retries():
    script = Script(*[(503, {})] * 3)
    r = client_for(script, max_attempts=3).get("/")
    assert r.status_code == 503 and r.extensions["tollgate.give_up"] == "attempts"
    assert len(script.seen) == 3
    broke = Script((503, {}), (200, {}))
    transport = RetryTransport(
        httpx.MockTransport(broke),
        policy=RetryPolicy(backoff=Backoff(0.001, 0.01)),
        budget=RetryBudget(min_per_sec=0, ratio=0.0),
    )
    r = httpx.Client(transport=transport, base_url="http://test").get("/")
    assert r.extensions["tollgate.give_up"] == "budget" and len(broke.seen) == 1


def test_a_refused_connection_is_retried_then_raised():
    script = Script(httpx.ConnectError("refused"), (200, {}))
    assert client_for(script).post("/").status_code == 200
    failing = Script(*[httpx.ConnectError("refused")] * 2)
    with pytest.raises(httpx.ConnectError):
        client_for(failing, max_attempts=2).post("/")
    assert len(failing.seen) == 2


def test_the_transport_waits_out_a_real_servers_throttle(servers):
    server = servers("fastapi")
    with httpx.Client(base_url=server.url, timeout=10) as plain, httpx.Client(
        base_url=server.url, transport=RetryTransport(), timeout=10
    ) as polite:
        statuses = [plain.get("/v1/items").status_code for _ in range(6)]
        assert statuses[-1] == 429
        r = polite.get("/v1/items")
    assert r.status_code == 200 and r.extensions["tollgate.attempts"] == 2


def test_the_async_transport_runs_the_same_loop_without_blocking_the_event_loop():
    import asyncio

    async def main() -> None:
        script = Script((503, {"Retry-After": "1"}), (200, {}), (429, {"Retry-After": "120"}))
        transport = AsyncRetryTransport(
            httpx.MockTransport(script), policy=RetryPolicy(max_wait=5.0, backoff=Backoff(0.001, 0.01))
        )
        finished = []

        async def other_work() -> None:
            await asyncio.sleep(0)
            finished.append("other work")

        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:

            async def request() -> httpx.Response:
                r = await client.get("/")
                finished.append("request")
                return r

            first, _ = await asyncio.gather(request(), other_work())
            second = await client.get("/")
        assert first.status_code == 200 and first.extensions["tollgate.attempts"] == 2
        assert second.status_code == 429 and second.extensions["tollgate.give_up"] == "wait_too_long"
        # The other task ran while the request waited out its Retry-After.
        assert finished == ["other work", "request"]

    asyncio.run(main())
