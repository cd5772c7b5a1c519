"""The demo gateway's routes as a FastAPI app and a Flask app, each behind tollgate's
middleware, for the test servers (uvicorn, waitress) to load with ``--factory`` / ``--call``.

The profile is ``TOLLGATE_TEST_PROFILE``; callers are identified by the bearer tokens of
``tokens.yaml`` (no token: anonymous), as the gateway does. ``POST /test/reload`` (no route of
the profile matches it, so it is not limited) reloads the limiter with the YAML in the body.
"""


import os
from pathlib import Path
from typing import Optional, Tuple

import tollgate

HERE = Path(__file__).parent


def _tokens() -> dict:
    tokens = {}
    section = False
    for line in (HERE / "tokens.yaml").read_text().splitlines():
        if line.startswith("tokens:"):
            section = True
        elif section and ":" in line and "{" in line:
            token, rest = line.strip().split(":", 1)
            fields = dict(p.strip().split(": ") for p in rest.strip(" {}").split(","))
            tokens[token] = (fields["tenant"], fields["principal"])
    return tokens


TOKENS = _tokens()


def bearer(value: Optional[str]) -> Optional[Tuple[str, str]]:
    if value and value.startswith("Bearer "):
        return TOKENS.get(value[len("Bearer ") :].strip())
    return None


def _limiter() -> tollgate.Limiter:
    return tollgate.Limiter.from_yaml(os.environ["TOLLGATE_TEST_PROFILE"])


def fastapi_app():
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse

    from tollgate.asgi import TollgateMiddleware

    limiter = _limiter()
    app = FastAPI()

    def identify(scope) -> Optional[Tuple[str, str]]:
        for name, value in scope["headers"]:
            if name == b"authorization":
                return bearer(value.decode("latin-1"))
        return None

    app.add_middleware(TollgateMiddleware, limiter=limiter, identify=identify)

    @app.get("/v1/items")
    def list_items():
        return {"items": []}

    @app.post("/v1/items", status_code=201)
    def create_item():
        return {"created": True}

    @app.post("/v1/register", status_code=201)
    def register():
        return {"registered": True}

    @app.post("/v1/reports/run", status_code=202)
    def run_report():
        return {"report": "queued"}

    @app.post("/test/reload")
    async def reload(request: Request):
        try:
            limiter.reload((await request.body()).decode())
        except tollgate.ProfileError as e:
            return JSONResponse({"error": str(e), "line": e.line, "column": e.column}, status_code=400)
        return PlainTextResponse("reloaded")

    return app


def flask_app():
    from flask import Flask, request

    from tollgate.wsgi import TollgateWSGIMiddleware

    limiter = _limiter()
    app = Flask(__name__)

    @app.get("/v1/items")
    def list_items():
        return {"items": []}

    @app.post("/v1/items")
    def create_item():
        return {"created": True}, 201

    @app.post("/v1/register")
    def register():
        return {"registered": True}, 201

    @app.post("/v1/reports/run")
    def run_report():
        return {"report": "queued"}, 202

    @app.post("/test/reload")
    def reload():
        try:
            limiter.reload(request.get_data(as_text=True))
        except tollgate.ProfileError as e:
            return {"error": str(e), "line": e.line, "column": e.column}, 400
        return "reloaded"

    app.wsgi_app = TollgateWSGIMiddleware(
        app.wsgi_app, limiter, lambda environ: bearer(environ.get("HTTP_AUTHORIZATION"))
    )
    return app
