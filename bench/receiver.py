"""Receiver latency: signed `issues.labeled` deliveries, enqueue into a real redis-server
included, sent open-loop at a fixed rate to a real uvicorn process (one worker), beside a
bare FastAPI endpoint under the same load in the same run.

Open loop: each request's latency counts from the moment it was due to be sent, so a
slow server cannot hide behind a load generator that waits for it.

    python -m bench.receiver
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bot.webhook_events import sign

RATE = 200  # deliveries per second
SECONDS = 8.0
WARMUP_SECONDS = 1.0
CONNECTIONS = 64  # GitHub opens a connection per delivery; keep-alive here spares our CPU
TARGET_P99_MS = 50.0
SECRET = "bench-secret-of-at-least-32-characters"
QUEUE = "frognano-bench"
REPO_ROOT = Path(__file__).resolve().parent.parent


def _labeled_payload(number: int) -> bytes:
    # About the size of a real delivery: GitHub sends full issue, repository and sender
    # objects, mostly URLs.
    urls = {f"{name}_url": f"https://api.github.com/repos/acme/calc/{name}{{/number}}"
            for name in ("issues", "pulls", "labels", "comments", "commits", "contents",
                         "branches", "tags", "hooks", "events", "forks", "keys", "milestones",
                         "notifications", "releases", "deployments", "collaborators")}
    payload = {
        "action": "labeled",
        "issue": {"number": number, "title": "add() returns the difference",
                  "body": "Steps to reproduce:\n" + "add(2, 2) == 0\n" * 40,
                  "user": {"login": "carol", "type": "User", **urls}, "labels": [], **urls},
        "label": {"id": 1, "name": "frognano", "color": "0e8a16"},
        "repository": {"id": 9, "name": "calc", "full_name": "acme/calc",
                       "owner": {"login": "acme", "type": "Organization", **urls}, **urls},
        "sender": {"login": "alice", "type": "User", **urls},
        "installation": {"id": 42},
    }
    return json.dumps(payload).encode()


def _requests(count: int, port: int, first: int = 0) -> list[bytes]:
    """Deliveries of distinct issues: the receiver drops a signed body it has seen before
    (a replay), whatever its delivery id."""
    prepared = []
    for number in range(first, first + count):
        body = _labeled_payload(number)
        head = (f"POST /webhooks/github HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Content-Type: application/json\r\nUser-Agent: GitHub-Hookshot/bench\r\n"
                f"Content-Length: {len(body)}\r\nX-GitHub-Event: issues\r\n"
                f"X-GitHub-Delivery: {uuid.uuid4()}\r\n"
                f"X-Hub-Signature-256: {sign(SECRET, body)}\r\n\r\n")
        prepared.append(head.encode() + body)
    return prepared


async def _read_status(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return int(lines[0].split()[1])


async def _open_loop(port: int, requests: list[bytes], rate: float
                     ) -> tuple[list[float], list[int], float]:
    """Send `requests` at `rate`/s; (latencies in s, statuses, wall time of the whole run)."""
    loop = asyncio.get_running_loop()
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(CONNECTIONS):
        pool.put_nowait(await asyncio.open_connection("127.0.0.1", port))
    latencies: list[float] = []
    statuses: list[int] = []

    async def send(request: bytes, due: float) -> None:
        reader, writer = await pool.get()
        writer.write(request)
        await writer.drain()
        statuses.append(await _read_status(reader))
        latencies.append(loop.time() - due)
        pool.put_nowait((reader, writer))

    start = loop.time() + 0.05
    tasks = []
    for index, request in enumerate(requests):
        due = start + index / rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(request, due)))
    await asyncio.gather(*tasks)
    wall = loop.time() - start
    while not pool.empty():
        _, writer = pool.get_nowait()
        writer.close()
    return latencies, statuses, wall


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_ready(port: int, process: subprocess.Popen[bytes], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as probe:
                probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if b" 200 " in probe.recv(64):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("server did not become ready")


def _start_server(kind: str, port: int, redis_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "GITHUB_WEBHOOK_SECRET": SECRET, "FROGNANO_REDIS_URL": redis_url,
           "FROGNANO_QUEUE": QUEUE.removesuffix("-control")}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.receiver", "--serve", kind, "--port", str(port)],
            cwd=REPO_ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
    _wait_ready(port, process)
    return process


def _measure(kind: str, redis_url: str, workdir: Path) -> dict[str, Any]:
    port = _free_port()
    server = _start_server(kind, port, redis_url, workdir / f"{kind}.log")
    try:
        warmup = _requests(int(RATE * WARMUP_SECONDS), port)
        asyncio.run(_open_loop(port, warmup, RATE))
        measured = _requests(int(RATE * SECONDS), port, first=len(warmup))
        latencies, statuses, wall = asyncio.run(_open_loop(port, measured, RATE))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    return {
        "p50_ms": _percentile(latencies, 0.50) * 1000,
        "p99_ms": _percentile(latencies, 0.99) * 1000,
        "rate": len(latencies) / wall,
        "errors": sum(status != 202 for status in statuses),
        "sent": len(warmup) + len(measured),
    }


def run() -> list[dict[str, Any]]:
    from tests.support.redis_server import start_redis

    workdir = Path(tempfile.mkdtemp(prefix="frognano-bench-receiver-"))
    redis_server = start_redis(workdir / "redis")
    try:
        bare = _measure("bare", redis_server.url, workdir)
        receiver = _measure("receiver", redis_server.url, workdir)
        with redis_server.client() as client:
            enqueued = client.llen(f"{QUEUE}-control")
    finally:
        redis_server.stop()
    target = f"≤ {TARGET_P99_MS:.0f} ms at {RATE}/s"
    rows = [
        {"name": "receiver p50 (signed, enqueued)", "value": receiver["p50_ms"], "unit": "ms",
         "target": "", "ok": None},
        {"name": "receiver p99 (signed, enqueued)", "value": receiver["p99_ms"], "unit": "ms",
         "target": target, "ok": receiver["p99_ms"] <= TARGET_P99_MS},
        {"name": "receiver deliveries/s (open loop)", "value": receiver["rate"], "unit": "/s",
         "target": f"≥ {RATE * 0.95:.0f}/s", "ok": receiver["rate"] >= RATE * 0.95},
        {"name": "receiver non-202 answers", "value": receiver["errors"], "unit": "",
         "target": "0", "ok": receiver["errors"] == 0},
        {"name": "messages in the control queue / deliveries", "value":
         enqueued / receiver["sent"], "unit": "", "target": "1.000",
         "ok": enqueued == receiver["sent"]},
        {"name": "bare FastAPI p50", "value": bare["p50_ms"], "unit": "ms", "target": "",
         "ok": None},
        {"name": "bare FastAPI p99", "value": bare["p99_ms"], "unit": "ms", "target": "",
         "ok": None},
        {"name": "bare FastAPI requests/s (open loop)", "value": bare["rate"], "unit": "/s",
         "target": "", "ok": None},
    ]
    return rows


# --- the servers, in their own processes ---------------------------------------------------


def _serve_bare(port: int) -> int:
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.post("/webhooks/github")
    async def bare(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse({"queued": True}, 202)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    return 0


def _serve_receiver(port: int) -> int:
    from bot.settings import BotSettings
    from frognano.serve_command import run_serve

    return run_serve(BotSettings(_env_file=None), "127.0.0.1", port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.receiver")
    parser.add_argument("--serve", choices=["bare", "receiver"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve == "bare":
        return _serve_bare(args.port)
    if args.serve == "receiver":
        return _serve_receiver(args.port)
    for row in run():
        print(f"{row['name']:<45} {row['value']:>10.3f} {row['unit']:<3} {row['target']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
