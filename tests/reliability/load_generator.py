"""`python -m tests.reliability.load_generator PLAN RESULTS`: send signed deliveries
open-loop (bench/receiver.py's generator) and write each one's status and latency.

A process of its own, so that the fake GitHub serving the workers in the test process
does not hold the generator back and inflate the latencies it measures.

PLAN is JSON: {"port", "secret", "rate", "deliveries": [{"event", "id", "payload"}]}.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from bench.receiver import _open_loop
from bot.webhook_events import sign


def raw_request(port: int, secret: str, delivery: dict[str, Any]) -> bytes:
    body = json.dumps(delivery["payload"]).encode()
    head = (f"POST /webhooks/github HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\nUser-Agent: GitHub-Hookshot/reliability\r\n"
            f"Content-Length: {len(body)}\r\nX-GitHub-Event: {delivery['event']}\r\n"
            f"X-GitHub-Delivery: {delivery['id']}\r\n"
            f"X-Hub-Signature-256: {sign(secret, body)}\r\n\r\n")
    return head.encode() + body


def main(plan_path: str, results_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    requests = [raw_request(plan["port"], plan["secret"], d) for d in plan["deliveries"]]
    latencies, statuses, wall = asyncio.run(_open_loop(plan["port"], requests, plan["rate"]))
    Path(results_path).write_text(json.dumps(
        {"latencies": latencies, "statuses": statuses, "wall": wall}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
