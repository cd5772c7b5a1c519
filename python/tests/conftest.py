"""Servers on loopback for the tests: tollgate's demo gateway (the reference answers), the
FastAPI app under uvicorn and the Flask app under waitress (``apps.py``), each on a free port
and stopped after its test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).parent
PYTHON_DIR = HERE.parent
REPO = PYTHON_DIR.parent
PROFILES = HERE / "profiles"
TOKENS = HERE / "tokens.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gateway_binary() -> Path:
    """``TOLLGATE_GATEWAY``, else the repository's build (debug or release), else built now."""
    given = os.environ.get("TOLLGATE_GATEWAY")
    if given:
        return Path(given)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    for profile in ("debug", "release"):
        candidate = target / profile / "tollgate-gateway"
        if candidate.exists():
            return candidate
    subprocess.run(["cargo", "build", "-p", "tollgate-gateway"], cwd=REPO, check=True)
    return target / "debug" / "tollgate-gateway"


class Server:
    def __init__(self, name: str, argv: list, port: int, env: dict, log: Path) -> None:
        self.name = name
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self._log_file = open(log, "wb")
        self.process = subprocess.Popen(
            argv, cwd=HERE, env={**os.environ, **env}, stdout=self._log_file, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited: {log.read_text(errors='replace')}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{name} did not listen within 60 s: {log.read_text(errors='replace')}")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()


def start(kind: str, profile: str, tmp: Path) -> Server:
    port = free_port()
    profile_path = str(PROFILES / f"{profile}.yaml")
    env = {"TOLLGATE_TEST_PROFILE": profile_path, "PYTHONPATH": str(HERE)}
    if kind == "gateway":
        argv = [
            str(gateway_binary()),
            "--listen", f"127.0.0.1:{port}",
            "--operator-listen", "off",
            "--profile", profile_path,
            "--tokens", str(TOKENS),
        ]
        env["RUST_LOG"] = "warn"
    elif kind == "fastapi":
        argv = [
            sys.executable, "-m", "uvicorn", "--factory", "apps:fastapi_app",
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
        ]
    elif kind == "flask":
        argv = [
            sys.executable, "-m", "waitress", "--listen", f"127.0.0.1:{port}",
            "--threads", "8", "--call", "apps:flask_app",
        ]
    else:
        raise ValueError(kind)
    return Server(kind, argv, port, env, tmp / f"{kind}.log")


@pytest.fixture
def servers(tmp_path):
    """``servers(kind, profile)`` starts one; every server started is stopped after the test."""
    started = []

    def make(kind: str, profile: str = "contract") -> Server:
        s = start(kind, profile, tmp_path)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def client():
    with httpx.Client(timeout=10) as c:
        yield c
