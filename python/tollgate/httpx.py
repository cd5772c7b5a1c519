"""An ``httpx`` transport that retries as ``tollgate-client`` does.

Each request runs on the Rust retry loop (``RetryPolicy.run``): the server's ``Retry-After``
first (measured from its ``Date``), capped exponential backoff with jitter otherwise, one
deadline over all attempts, a shared ``RetryBudget``, and only requests that may be repeated
(idempotent methods, or an ``Idempotency-Key`` header) are retried once they may have been
sent. When the loop gives up, the last response is returned as it is, with the reason in
``response.extensions["tollgate.give_up"]``.

``AsyncRetryTransport`` runs the same loop on a worker thread (it sleeps there, with the GIL
released) and each attempt on the event loop, so the loop is never blocked.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import httpx

from ._tollgate import RetryBudget, RetryPolicy

#: Errors that prove the request never reached the server: retried whatever the method.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)


class RetryTransport(httpx.BaseTransport):
    """Wraps ``transport`` (a new ``httpx.HTTPTransport`` by default).

    Share one ``budget`` between every client of one service: it bounds the retries of all of
    them together. The request body is read into memory so that it can be sent again.
    """

    def __init__(
        self,
        transport: Optional[httpx.BaseTransport] = None,
        *,
        policy: Optional[RetryPolicy] = None,
        budget: Optional[RetryBudget] = None,
    ) -> None:
        self.transport = transport if transport is not None else httpx.HTTPTransport()
        self.policy = policy if policy is not None else RetryPolicy()
        self.budget = budget if budget is not None else RetryBudget()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        previous: list = []

        def send(attempt: int, timeout: Optional[float], key: Optional[str]) -> httpx.Response:
            # A response that is retried is never seen by the caller: free its connection.
            while previous:
                previous.pop().close()
            _with_timeout(request, timeout)
            response = self.transport.handle_request(request)
            previous.append(response)
            return response

        outcome = self.policy.run(
            self.budget,
            request.method,
            send,
            idempotency_key=request.headers.get("idempotency-key"),
            not_sent=NOT_SENT,
        )
        previous.clear()
        return _finish(outcome.response, outcome, request)

    def close(self) -> None:
        self.transport.close()


def _finish(response: Optional[httpx.Response], outcome, request: httpx.Request) -> httpx.Response:
    if response is None:  # the deadline left no time for any attempt
        raise httpx.TimeoutException("the retry deadline left no time for an attempt", request=request)
    response.extensions = {
        **response.extensions,
        "tollgate.attempts": outcome.attempts,
        "tollgate.give_up": outcome.give_up,
    }
    return response


def _with_timeout(request: httpx.Request, timeout: Optional[float]) -> None:
    if timeout is not None:
        request.extensions = {
            **request.extensions,
            "timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout},
        }


class AsyncRetryTransport(httpx.AsyncBaseTransport):
    """The asynchronous ``RetryTransport``: wraps ``transport`` (a new
    ``httpx.AsyncHTTPTransport`` by default). At most ``max_waiting`` requests wait for a retry
    at once (one worker thread each); more queue for a thread.
    """

    def __init__(
        self,
        transport: Optional[httpx.AsyncBaseTransport] = None,
        *,
        policy: Optional[RetryPolicy] = None,
        budget: Optional[RetryBudget] = None,
        max_waiting: int = 64,
    ) -> None:
        self.transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        self.policy = policy if policy is not None else RetryPolicy()
        self.budget = budget if budget is not None else RetryBudget()
        self._threads = ThreadPoolExecutor(max_waiting, thread_name_prefix="tollgate-retry")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        loop = asyncio.get_running_loop()
        previous: list = []

        async def attempt(timeout: Optional[float]) -> httpx.Response:
            while previous:
                await previous.pop().aclose()
            _with_timeout(request, timeout)
            response = await self.transport.handle_async_request(request)
            previous.append(response)
            return response

        def send(number: int, timeout: Optional[float], key: Optional[str]) -> httpx.Response:
            return asyncio.run_coroutine_threadsafe(attempt(timeout), loop).result()

        outcome = await loop.run_in_executor(
            self._threads,
            lambda: self.policy.run(
                self.budget,
                request.method,
                send,
                idempotency_key=request.headers.get("idempotency-key"),
                not_sent=NOT_SENT,
            ),
        )
        previous.clear()
        return _finish(outcome.response, outcome, request)

    async def aclose(self) -> None:
        await self.transport.aclose()
        self._threads.shutdown(wait=False)
