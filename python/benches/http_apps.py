"""The FastAPI app of ``requests_per_second.py``: one route, behind tollgate's middleware, behind slowapi, or
bare (``BENCH_LIMITER`` = ``tollgate``, ``slowapi`` or ``none``). Every limiter is given a
limit that the run does not reach, so every request is admitted and served."""

import os

from fastapi import FastAPI, Request

HUGE = 1_000_000_000

PROFILE = f"""\
name: bench
identities: {{ capacity: 65536 }}
route_classes:
  read:
    burst:     {{ tokens: {HUGE}, per: 1s }}
    sustained: {{ tokens: 4000000000, per: 1h }}
routes:
  - {{ method: GET, path: "/v1/**", class: read }}
"""


def app() -> FastAPI:
    which = os.environ.get("BENCH_LIMITER", "none")
    api = FastAPI()
    if which == "slowapi":
        from slowapi import Limiter
        from slowapi.middleware import SlowAPIMiddleware
        from slowapi.util import get_remote_address

        api.state.limiter = Limiter(key_func=get_remote_address, default_limits=[f"{HUGE}/second"])
        api.add_middleware(SlowAPIMiddleware)
    elif which == "tollgate":
        import tollgate
        from tollgate.asgi import TollgateMiddleware

        api.add_middleware(TollgateMiddleware, limiter=tollgate.Limiter.from_yaml(PROFILE))

    @api.get("/v1/items")
    def items(request: Request):
        return {"items": []}

    return api
