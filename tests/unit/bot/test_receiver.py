"""The receiver over HTTP against a real redis-server and a real Celery client.

Queued messages are read back from the Redis list kombu keeps per queue.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from bot.app import MAX_BODY_BYTES, create_app, redis_client_for
from bot.enqueue import (
    DONE_TTL_S,
    CeleryEnqueuer,
    DeliveryLedger,
    EnqueueOutcome,
    enqueue_once,
)
from bot.logs import json_handler
from bot.settings import BotSettings
from bot.triggers import ACCEPT_TASK, Trigger
from bot.webhook_events import sign
from tests.support.paths import REPO_ROOT
from tests.unit.bot.test_webhook_events import commented, labeled

if TYPE_CHECKING:  # imported as a plugin below, so it must not be imported before
    from tests.support.redis_server import RedisServer


SECRET = "webhook-secret-of-at-least-32-characters"
QUEUE = "frognano-control"  # settings.queue "frognano" + CONTROL_QUEUE_SUFFIX
REPO_ROOT = REPO_ROOT


def settings(secret: str | None = SECRET) -> BotSettings:
    return BotSettings(_env_file=None, GITHUB_WEBHOOK_SECRET=secret, FROGNANO_QUEUE="frognano")


def labeled_at(updated_at: str) -> dict[str, Any]:
    """A label event of its own: real events differ at least in the issue's `updated_at`."""
    payload = labeled()
    payload["issue"] = {**payload["issue"], "updated_at": updated_at}
    return payload


def queued(server: RedisServer) -> list[tuple[str, dict[str, Any]]]:
    """(task name, kwargs) of every message waiting on the control queue, oldest first."""
    with server.client() as client:
        raw = client.lrange(QUEUE, 0, -1)
    messages = []
    for item in reversed(raw):  # kombu LPUSHes and workers BRPOP
        message = json.loads(item)
        _args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        messages.append((message["headers"]["task"], kwargs))
    return messages


def deliver(client: TestClient | httpx.Client, event: str, payload: Any, *,
            delivery_id: str | None = None, secret: str | None = SECRET,
            body: bytes | None = None) -> httpx.Response:
    body = json.dumps(payload).encode() if body is None else body
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
               "Content-Type": "application/json"}
    if secret is not None:
        headers["X-Hub-Signature-256"] = sign(secret, body)
    return client.post("/webhooks/github", content=body, headers=headers)


@pytest.fixture
def enqueuer(redis_server: RedisServer) -> Iterator[CeleryEnqueuer]:
    real = CeleryEnqueuer(redis_server.url, QUEUE)
    yield real
    real.close()


@pytest.fixture
def client(redis_server: RedisServer, enqueuer: CeleryEnqueuer) -> Iterator[TestClient]:
    redis_client = redis_client_for(redis_server.url)
    with TestClient(create_app(settings(), enqueuer=enqueuer,
                               redis_client=redis_client)) as test_client:
        yield test_client
    redis_client.close()


# --- the happy path and the refusals ----------------------------------------------------------


def test_signed_label_enqueues_one_accept_task(client: TestClient,
                                               redis_server: RedisServer) -> None:
    response = deliver(client, "issues", labeled(), delivery_id="d-label")
    assert response.status_code == 202
    assert response.json() == {"queued": True, "task_id": "delivery-d-label"}
    assert queued(redis_server) == [(ACCEPT_TASK, Trigger(
        delivery_id="d-label", installation_id=42, owner="acme", repo="calc", issue_number=7,
        kind="label", actor="alice").to_kwargs())]
    with redis_server.client() as raw:
        assert 4 * 24 * 3600 - 60 < raw.ttl("frognano:delivery:d-label") <= DONE_TTL_S


def test_retry_comment_enqueues_guidance(client: TestClient, redis_server: RedisServer) -> None:
    response = deliver(client, "issue_comment", commented("/frognano retry\nmind the sign"))
    assert response.status_code == 202
    [(_, kwargs)] = queued(redis_server)
    assert (kwargs["kind"], kwargs["guidance"], kwargs["comment_id"]) == (
        "retry", "mind the sign", 555)


@pytest.mark.parametrize("secret", [None, "wrong-secret"])
def test_missing_or_bad_signature_is_401_and_queues_nothing(
        client: TestClient, redis_server: RedisServer, secret: str | None) -> None:
    assert deliver(client, "issues", labeled(), secret=secret).status_code == 401
    assert queued(redis_server) == []


def test_body_changed_after_signing_is_401(client: TestClient, redis_server: RedisServer) -> None:
    body = json.dumps(labeled()).encode()
    headers = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "d-x",
               "X-Hub-Signature-256": sign(SECRET, body)}
    response = client.post("/webhooks/github", content=body + b" ", headers=headers)
    assert response.status_code == 401
    assert queued(redis_server) == []


def test_no_secret_configured_is_503_and_never_accepts(redis_server: RedisServer,
                                                       enqueuer: CeleryEnqueuer) -> None:
    app = create_app(settings(secret=None), enqueuer=enqueuer,
                     redis_client=redis_client_for(redis_server.url))
    with TestClient(app) as unconfigured:
        response = deliver(unconfigured, "issues", labeled(), secret="")
    assert response.status_code == 503
    assert "GITHUB_WEBHOOK_SECRET" in response.json()["error"]
    assert queued(redis_server) == []


def test_oversize_body_is_413(client: TestClient, redis_server: RedisServer) -> None:
    body = b"x" * (MAX_BODY_BYTES + 1)
    assert deliver(client, "issues", None, body=body).status_code == 413


def test_oversize_chunked_body_without_length_is_413(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(26):
            yield b"x" * (1024 * 1024)

    response = client.post("/webhooks/github", content=chunks(), headers={
        "X-GitHub-Event": "issues", "X-GitHub-Delivery": "d-big",
        "X-Hub-Signature-256": "sha256=00"})
    assert response.status_code == 413


def test_malformed_json_is_400(client: TestClient, redis_server: RedisServer) -> None:
    assert deliver(client, "issues", None, body=b'{"action": "labeled",').status_code == 400
    assert queued(redis_server) == []


def test_unknown_payload_shape_is_400(client: TestClient, redis_server: RedisServer) -> None:
    payload = labeled()
    del payload["installation"]
    response = deliver(client, "issues", payload)
    assert response.status_code == 400
    assert "installation" in response.json()["error"]
    assert queued(redis_server) == []


def test_ping_is_200(client: TestClient) -> None:
    response = deliver(client, "ping", {"zen": "Keep it logically awesome.", "hook_id": 1})
    assert response.status_code == 200


@pytest.mark.parametrize(("event", "payload"), [
    ("push", {"ref": "refs/heads/main"}),
    ("issues", labeled("bug")),
    ("issue_comment", commented("nice work")),
])
def test_unrelated_events_are_204(client: TestClient, redis_server: RedisServer,
                                  event: str, payload: dict[str, Any]) -> None:
    response = deliver(client, event, payload)
    assert response.status_code == 204
    assert response.content == b""
    assert queued(redis_server) == []


def test_own_bot_comment_is_ignored(client: TestClient, redis_server: RedisServer) -> None:
    payload = commented("/frognano retry with the failure text",
                        sender={"login": "frognano[bot]", "type": "Bot"})
    assert deliver(client, "issue_comment", payload).status_code == 204
    assert queued(redis_server) == []


# --- exactly once -----------------------------------------------------------------------------


def test_redelivery_enqueues_once(client: TestClient, redis_server: RedisServer) -> None:
    first = deliver(client, "issues", labeled(), delivery_id="d-dup")
    again = deliver(client, "issues", labeled(), delivery_id="d-dup")
    assert first.status_code == 202
    assert again.status_code == 200
    assert again.json() == {"duplicate": True, "task_id": "delivery-d-dup"}
    assert len(queued(redis_server)) == 1


def test_captured_delivery_replayed_under_a_new_id_queues_nothing(
        client: TestClient, redis_server: RedisServer) -> None:
    """The attack: keep one signed delivery (body and signature) and send it again with
    fresh X-GitHub-Delivery ids, even days later, to start the bot again and again."""
    body = json.dumps(labeled()).encode()
    assert deliver(client, "issues", None, body=body, delivery_id="d-orig").status_code == 202
    for n in range(3):
        replay = deliver(client, "issues", None, body=body, delivery_id=f"d-replay-{n}")
        assert replay.status_code == 200, replay.text
        assert replay.json() == {"duplicate": True, "replayed": True,
                                 "task_id": "delivery-d-orig"}
    assert [kwargs["delivery_id"] for _, kwargs in queued(redis_server)] == ["d-orig"]
    with redis_server.client() as raw:
        digest = hashlib.sha256(body).hexdigest()
        assert raw.get(f"frognano:body:{digest}") == b"d-orig"
        assert DONE_TTL_S - 60 < raw.ttl(f"frognano:body:{digest}") <= DONE_TTL_S
    # GitHub's own redelivery keeps the id: a duplicate, as before. A new event is queued.
    assert deliver(client, "issues", None, body=body, delivery_id="d-orig").json() == {
        "duplicate": True, "task_id": "delivery-d-orig"}
    assert deliver(client, "issues", labeled_at("2024-05-01T10:00:01Z")).status_code == 202
    assert len(queued(redis_server)) == 2
    metrics = client.get("/metrics").text
    assert 'frognano_webhook_deliveries_total{event="issues",outcome="replayed"} 3.0' in metrics


def test_replay_while_the_broker_is_down_leaves_the_redelivery_to_github(
        redis_server: RedisServer, redis_factory: Callable[[], RedisServer]) -> None:
    broker = redis_factory()
    broker_enqueuer = CeleryEnqueuer(broker.url, QUEUE)
    ledger_client = redis_client_for(redis_server.url)
    body = json.dumps(labeled()).encode()
    try:
        with TestClient(create_app(settings(), enqueuer=broker_enqueuer,
                                   redis_client=ledger_client)) as client:
            broker.stop()
            assert deliver(client, "issues", None, body=body,
                           delivery_id="d-first").status_code == 503
            broker.start()
            replay = deliver(client, "issues", None, body=body, delivery_id="d-copy")
            assert replay.status_code == 200 and replay.json()["replayed"] is True
            assert deliver(client, "issues", None, body=body,
                           delivery_id="d-first").status_code == 202  # GitHub's redelivery
        assert [kwargs["delivery_id"] for _, kwargs in queued(broker)] == ["d-first"]
    finally:
        broker_enqueuer.close()
        ledger_client.close()


def test_a_weak_webhook_secret_is_refused_at_start(redis_server: RedisServer,
                                                   enqueuer: CeleryEnqueuer) -> None:
    for weak, why in (("short-secret", "only 12 characters"), (" " * 40, "blank"),
                      ("\t\n" * 20, "blank")):
        with pytest.raises(ValueError, match=why) as refused:
            create_app(settings(secret=weak), enqueuer=enqueuer,
                       redis_client=redis_client_for(redis_server.url))
        assert "openssl rand -hex 32" in str(refused.value)
    create_app(settings(secret="x" * 32), enqueuer=enqueuer,
               redis_client=redis_client_for(redis_server.url))


class SlowEnqueuer:
    """The real Celery enqueuer, slowed down so concurrent copies surely overlap."""

    def __init__(self, real: CeleryEnqueuer, delay_s: float) -> None:
        self.real, self.delay_s = real, delay_s

    def enqueue(self, trigger: Trigger) -> str:
        time.sleep(self.delay_s)
        return self.real.enqueue(trigger)


def test_concurrent_redeliveries_enqueue_once(redis_server: RedisServer,
                                              enqueuer: CeleryEnqueuer) -> None:
    app = create_app(settings(), enqueuer=SlowEnqueuer(enqueuer, 0.3),
                     redis_client=redis_client_for(redis_server.url))
    copies = 8
    barrier = threading.Barrier(copies)
    statuses: list[int] = []
    with TestClient(app) as client:
        def send() -> None:
            barrier.wait()
            statuses.append(deliver(client, "issues", labeled(),
                                    delivery_id="d-race").status_code)

        threads = [threading.Thread(target=send) for _ in range(copies)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(statuses) == [200] * (copies - 1) + [202]
    assert len(queued(redis_server)) == 1


def test_redis_down_is_503_then_redelivery_enqueues_once(
        client: TestClient, redis_server: RedisServer) -> None:
    assert deliver(client, "issues", labeled_at("2024-05-01T10:00:00Z"),
                   delivery_id="d-before").status_code == 202
    redis_server.stop()
    started = time.monotonic()
    response = deliver(client, "issues", labeled(), delivery_id="d-outage")
    assert response.status_code == 503
    assert time.monotonic() - started < 3
    redis_server.restart()
    with redis_server.client() as raw:
        assert raw.get("frognano:delivery:d-outage") is None  # nothing half done
    assert deliver(client, "issues", labeled(), delivery_id="d-outage").status_code == 202
    assert deliver(client, "issues", labeled(), delivery_id="d-outage").status_code == 200
    assert [kwargs["delivery_id"] for _, kwargs in queued(redis_server)] == [
        "d-before", "d-outage"]


def test_broker_down_releases_the_claim(
        redis_server: RedisServer, redis_factory: Callable[[], RedisServer]) -> None:
    broker = redis_factory()
    broker_enqueuer = CeleryEnqueuer(broker.url, QUEUE)
    ledger_client = redis_client_for(redis_server.url)
    app = create_app(settings(), enqueuer=broker_enqueuer, redis_client=ledger_client)
    try:
        with TestClient(app) as client:
            broker.stop()
            assert deliver(client, "issues", labeled(), delivery_id="d-b").status_code == 503
            assert ledger_client.get("frognano:delivery:d-b") is None
            broker.start()
            assert deliver(client, "issues", labeled(), delivery_id="d-b").status_code == 202
        assert len(queued(broker)) == 1
    finally:
        broker_enqueuer.close()


def test_ledger_release_only_drops_its_own_claim(redis_server: RedisServer) -> None:
    with redis_server.client() as raw:
        ledger = DeliveryLedger(raw)
        assert ledger.claim("d-1", "mine")
        assert not ledger.claim("d-1", "theirs")
        ledger.release("d-1", "theirs")
        assert ledger.done_task_id("d-1") == (True, None)
        ledger.release("d-1", "mine")
        assert ledger.done_task_id("d-1") == (False, None)


def test_copy_waiting_on_a_stuck_claim_gives_up_without_enqueueing(
        redis_server: RedisServer, enqueuer: CeleryEnqueuer) -> None:
    trigger = Trigger(delivery_id="d-stuck", installation_id=42, owner="acme", repo="calc",
                      issue_number=7, kind="label", actor="alice")
    with redis_server.client() as raw:
        ledger = DeliveryLedger(raw)
        assert ledger.claim("d-stuck", "a-receiver-that-died")
        outcome = enqueue_once(ledger, enqueuer, trigger, wait_s=0.1)
    assert outcome == EnqueueOutcome("in_progress")
    assert queued(redis_server) == []


# --- health, metrics, logs --------------------------------------------------------------------


def test_healthz_follows_redis(client: TestClient, redis_server: RedisServer) -> None:
    up = client.get("/healthz")
    assert up.status_code == 200
    assert up.json()["checks"]["redis"]["ok"] is True
    redis_server.stop()
    down = client.get("/healthz")
    assert down.status_code == 503
    assert down.json()["status"] == "unavailable"
    assert "ConnectionError" in down.json()["checks"]["redis"]["error"]
    redis_server.start()
    assert client.get("/healthz").status_code == 200


def test_healthz_runs_extra_checks(redis_server: RedisServer, enqueuer: CeleryEnqueuer) -> None:
    from bot.app import HealthCheck

    def database() -> None:
        raise RuntimeError("database is locked")

    app = create_app(settings(), enqueuer=enqueuer,
                     redis_client=redis_client_for(redis_server.url),
                     health_checks=[HealthCheck("database", database)])
    with TestClient(app) as client:
        response = client.get("/healthz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["redis"]["ok"] and not checks["database"]["ok"]


def test_metrics_count_deliveries(client: TestClient) -> None:
    deliver(client, "issues", labeled())
    deliver(client, "push", {})
    deliver(client, "issues", labeled(), secret="wrong")
    text = client.get("/metrics").text
    assert 'frognano_webhook_deliveries_total{event="issues",outcome="queued"} 1.0' in text
    assert 'frognano_webhook_deliveries_total{event="other",outcome="ignored"} 1.0' in text
    assert 'frognano_webhook_deliveries_total{event="unverified",outcome="bad_signature"} 1.0' \
        in text
    assert "frognano_enqueue_seconds_count 1.0" in text
    assert "frognano_webhook_request_seconds_bucket" in text


def test_logs_carry_the_delivery_id(client: TestClient) -> None:
    stream = io.StringIO()
    handler = json_handler(stream)
    logger = logging.getLogger("frognano.bot.receiver")
    logger.addHandler(handler)
    previous_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        deliver(client, "issues", labeled(), delivery_id="d-logged")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) >= 2
    assert all(line["delivery_id"] == "d-logged" for line in lines)
    assert {"outcome": "queued", "status": 202}.items() <= lines[-1].items()


# --- the real server ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_serve_runs_the_receiver_under_uvicorn(redis_server: RedisServer) -> None:
    port = _free_port()
    script = ("import sys; from bot.settings import BotSettings; "
              "from frognano.serve_command import run_serve; "
              f"sys.exit(run_serve(BotSettings(_env_file=None), '127.0.0.1', {port}))")
    env = {**os.environ, "GITHUB_WEBHOOK_SECRET": SECRET, "FROGNANO_REDIS_URL": redis_server.url,
           "FROGNANO_QUEUE": "frognano"}
    server = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            deadline = time.monotonic() + 15
            while True:
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.05)
            assert deliver(http, "issues", labeled(), delivery_id="d-real").status_code == 202
    finally:
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=10)
    assert server.returncode in (0, -signal.SIGINT)  # uvicorn re-raises the signal it caught
    assert [kwargs["delivery_id"] for _, kwargs in queued(redis_server)] == ["d-real"]
    logged = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(entry.get("delivery_id") == "d-real" and entry.get("outcome") == "queued"
               for entry in logged)
    # No App id yet: setup is open, to the holder of the link in the log only.
    assert any(f"http://127.0.0.1:{port}/?token=" in str(entry.get("message"))
               for entry in logged), stderr


@pytest.mark.parametrize("weak", ["short", " " * 40])
def test_serve_refuses_a_short_or_blank_secret(weak: str) -> None:
    script = ("import sys; from bot.settings import BotSettings; "
              "from frognano.serve_command import run_serve; "
              "sys.exit(run_serve(BotSettings(_env_file=None), '127.0.0.1', 1))")
    env = {**os.environ, "GITHUB_WEBHOOK_SECRET": weak}
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert "GITHUB_WEBHOOK_SECRET is" in result.stderr and "at least 32" in result.stderr


def test_serve_refuses_to_start_without_a_secret() -> None:
    script = ("import sys; from bot.settings import BotSettings; "
              "from frognano.serve_command import run_serve; "
              "sys.exit(run_serve(BotSettings(_env_file=None), '127.0.0.1', 1))")
    env = {key: value for key, value in os.environ.items() if key != "GITHUB_WEBHOOK_SECRET"}
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "GITHUB_WEBHOOK_SECRET" in result.stderr


def test_redis_client_fails_fast() -> None:
    client = redis_client_for(f"redis://127.0.0.1:{_free_port()}/0")
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        client.ping()
    assert time.monotonic() - started < 2
