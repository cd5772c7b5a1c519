"""Requests per second and latency of one FastAPI app under uvicorn (one worker), bare, behind
tollgate's ASGI middleware and behind slowapi, driven by wrk over loopback.

    python benches/requests_per_second.py [--duration 10] [--connections 32]

Needs the wheel installed, ``pip install fastapi uvicorn slowapi`` and ``wrk`` on the PATH.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(which: str, port: int) -> subprocess.Popen:
    argv = [sys.executable, "-m", "uvicorn", "--factory", "http_apps:app", "--app-dir", str(HERE),
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"]
    p = subprocess.Popen(argv, cwd=HERE, env={**os.environ, "BENCH_LIMITER": which})
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise SystemExit(f"uvicorn ({which}) did not start")


def ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * UNITS[unit]


def wrk(url: str, duration: int, connections: int) -> tuple:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", url],
        check=True, capture_output=True, text=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = ms(re.search(r"50%\s+(\S+)", out).group(1))
    p99 = ms(re.search(r"99%\s+(\S+)", out).group(1))
    if "Non-2xx" in out:
        raise SystemExit(f"refusals in the run: {out}")
    return rps, p50, p99


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    args = ap.parse_args()
    print(f"wrk -t1 -c{args.connections} -d{args.duration}s --latency, uvicorn with one worker, GET /v1/items")
    print()
    print("| app | requests/s | p50 latency | p99 latency | added p50 over the bare app |")
    print("| --- | ---: | ---: | ---: | ---: |")
    bare = None
    for which in ("none", "tollgate", "slowapi"):
        port = free_port()
        server = serve(which, port)
        try:
            url = f"http://127.0.0.1:{port}/v1/items"
            wrk(url, 2, args.connections)  # warm-up
            rps, p50, p99 = wrk(url, args.duration, args.connections)
        finally:
            server.terminate()
            server.wait()
        bare = bare if bare is not None else p50
        name = {"none": "FastAPI, no limiter", "tollgate": "FastAPI + tollgate", "slowapi": "FastAPI + slowapi"}[which]
        added = "" if which == "none" else f"{p50 - bare:+.2f} ms"
        print(f"| {name} | {rps:,.0f} | {p50:.2f} ms | {p99:.2f} ms | {added} |", flush=True)


if __name__ == "__main__":
    main()
