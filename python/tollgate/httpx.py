"""An ``httpx`` transport that retries as ``tollgate-client`` does.

Each request runs on the Rust retry loop (``RetryPolicy.run``): the server's ``Retry-After``
first (measured from its ``Date``), capped exponential backoff with jitter otherwise, one
deadline over all attempts, a shared ``RetryBudget``, and only requests that may be repeated
(idempotent methods, or an ``Idempotency-Key`` header) are retried once they may have been
sent. When the loop gives up, the last response is returned as it is, with the reason in
``response.extensions["tollgate.give_up"]``.
"""

from __future__ import annotations

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
            if timeout is not None:
                request.extensions = {
                    **request.extensions,
                    "timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout},
                }
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
        response = outcome.response
        if response is None:  # the deadline left no time for any attempt
            raise httpx.TimeoutException("the retry deadline left no time for an attempt", request=request)
        previous.clear()
        response.extensions = {
            **response.extensions,
            "tollgate.attempts": outcome.attempts,
            "tollgate.give_up": outcome.give_up,
        }
        return response

    def close(self) -> None:
        self.transport.close()
