"""The webhook receiver: verify, route, enqueue exactly once, answer fast.

`create_app` is the only entry; it reads no environment. It makes no GitHub API calls:
authorizing the actor is the accept task's job on the worker side.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from redis.backoff import NoBackoff
from redis.retry import Retry
from starlette.concurrency import run_in_threadpool

from bot.deps import DashboardAuth, EarlyAnswer, send_early_answer
from bot.enqueue import (
    CeleryEnqueuer,
    DeliveryLedger,
    EnqueueError,
    EnqueueOutcome,
    Enqueuer,
    body_digest,
    enqueue_once,
)
from bot.logs import delivery_context
from bot.settings import BotSettings, webhook_secret_problem
from bot.setup_flow import SetupFlow
from bot.setup_flow import router as setup_router
from bot.triggers import CONTROL_QUEUE_SUFFIX, Trigger
from bot.webhook_events import Ignore, PayloadError, parse_json_body, route, verify_signature

if TYPE_CHECKING:
    from runstore.store import RunStore

log = logging.getLogger("frognano.bot.receiver")

WEBHOOK_PATH = "/webhooks/github"
MAX_BODY_BYTES = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB
DEFAULT_BOT_LOGIN = "frognano[bot]"
REDIS_TIMEOUT_S = 1.0
# Events kept as metric labels; anything else is counted as "other" to bound cardinality.
_KNOWN_EVENTS = frozenset({"ping", "issues", "issue_comment", "pull_request",
                           "pull_request_review", "pull_request_review_comment",
                           "check_suite", "check_run"})


def redis_client_for(url: str) -> redis.Redis:
    """A client that fails fast: a down Redis must become a 503 in about a second."""
    return redis.Redis.from_url(url, socket_connect_timeout=REDIS_TIMEOUT_S,
                                socket_timeout=REDIS_TIMEOUT_S, retry=Retry(NoBackoff(), 1))


# --- health -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthCheck:
    """One dependency probe for /healthz: `probe` raises when unhealthy (runs in a thread)."""

    name: str
    probe: Callable[[], None]


def redis_health_check(client: redis.Redis) -> HealthCheck:
    def ping() -> None:
        if not client.ping():
            raise RuntimeError("PING was not answered with PONG")

    return HealthCheck("redis", ping)


def run_store_health_check(store: RunStore) -> HealthCheck:
    return HealthCheck("database", store.ping)


def _run_check(check: HealthCheck) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        check.probe()
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                "ms": round((time.perf_counter() - started) * 1000, 2)}
    return {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 2)}


# --- metrics ------------------------------------------------------------------------------


class ReceiverMetrics:
    """Prometheus metrics in a registry of their own, so several apps can live in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.deliveries = Counter(
            "frognano_webhook_deliveries", "Webhook deliveries by event and outcome.",
            ["event", "outcome"], registry=self.registry)
        self.request_seconds = Histogram(
            "frognano_webhook_request_seconds", "Time to answer a webhook delivery.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry)
        self.enqueue_seconds = Histogram(
            "frognano_enqueue_seconds", "Dedupe plus publish of the accept task.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 2.5),
            registry=self.registry)
        self.health = Gauge("frognano_health_check_up", "1 when the last /healthz check passed.",
                            ["check"], registry=self.registry)


# --- the webhook --------------------------------------------------------------------------


class _Reject(Exception):
    """Answer now with `status`; `outcome` is the metric label."""

    def __init__(self, status: int, outcome: str, message: str) -> None:
        super().__init__(message)
        self.status, self.outcome, self.message = status, outcome, message


@dataclass
class _Answer:
    response: Response
    outcome: str
    event: str = "unverified"  # the event header is attacker-chosen until the signature holds


class _Receiver:
    def __init__(self, settings: BotSettings, enqueuer: Enqueuer, ledger: DeliveryLedger,
                 metrics: ReceiverMetrics, bot_login: str | None) -> None:
        self._secret = settings.webhook_secret
        self._trigger_label = settings.trigger_label
        self._enqueuer = enqueuer
        self._ledger = ledger
        self._metrics = metrics
        self._bot_login = bot_login

    async def __call__(self, request: Request) -> Response:
        started = time.perf_counter()
        delivery_id = request.headers.get("x-github-delivery")
        with delivery_context(delivery_id):
            answer = _Answer(Response(status_code=500), "error")
            try:
                answer = await self._handle(request, delivery_id)
            except _Reject as reject:
                answer = _Answer(JSONResponse({"error": reject.message}, reject.status),
                                 reject.outcome, answer.event)
            finally:
                self._metrics.deliveries.labels(answer.event, answer.outcome).inc()
                self._metrics.request_seconds.observe(time.perf_counter() - started)
            log.info("delivery %s", answer.outcome, extra={
                "event": request.headers.get("x-github-event"), "outcome": answer.outcome,
                "status": answer.response.status_code})
            return answer.response

    async def _handle(self, request: Request, delivery_id: str | None) -> _Answer:
        if not self._secret:
            raise _Reject(503, "not_configured", "GITHUB_WEBHOOK_SECRET is not set: the "
                          "receiver refuses unsigned deliveries")
        body = await _read_capped(request, MAX_BODY_BYTES)
        if not verify_signature(self._secret, body,
                                request.headers.get("x-hub-signature-256")):
            raise _Reject(401, "bad_signature", "missing or bad X-Hub-Signature-256")
        event_name = request.headers.get("x-github-event")
        if not event_name or not delivery_id:
            raise _Reject(400, "bad_request", "missing X-GitHub-Event or X-GitHub-Delivery")
        event = event_name if event_name in _KNOWN_EVENTS else "other"
        if event_name == "ping":
            return _Answer(JSONResponse({"pong": True}, 200), "ping", event)
        try:
            payload = parse_json_body(body)
            decision = route(event_name, payload, trigger_label=self._trigger_label,
                             bot_login=self._bot_login, delivery_id=delivery_id)
        except (ValueError, PayloadError) as exc:  # JSONDecodeError is a ValueError
            return _Answer(JSONResponse({"error": f"bad payload: {exc}"}, 400),
                           "bad_request", event)
        if isinstance(decision, Ignore):
            log.info("ignored: %s", decision.reason)
            return _Answer(Response(status_code=204), "ignored", event)
        return await self._enqueue(decision, event, body_digest(body))

    async def _enqueue(self, trigger: Trigger, event: str, digest: str) -> _Answer:
        started = time.perf_counter()
        try:
            outcome: EnqueueOutcome = await run_in_threadpool(
                partial(enqueue_once, self._ledger, self._enqueuer, trigger,
                        signed_body_digest=digest))
        except (redis.RedisError, EnqueueError) as exc:
            log.warning("broker unavailable: %s", exc)
            return _Answer(JSONResponse({"error": "broker unavailable, redeliver later"}, 503),
                           "unavailable", event)
        finally:
            self._metrics.enqueue_seconds.observe(time.perf_counter() - started)
        if outcome.status == "queued":
            log.info("queued %s trigger for %s", trigger.kind, trigger.issue_key,
                     extra={"task_id": outcome.task_id})
            return _Answer(JSONResponse({"queued": True, "task_id": outcome.task_id}, 202),
                           "queued", event)
        if outcome.status == "duplicate":
            return _Answer(JSONResponse({"duplicate": True, "task_id": outcome.task_id}, 200),
                           "duplicate", event)
        if outcome.status == "replayed":  # 200: nothing for a sender to retry
            return _Answer(JSONResponse({"duplicate": True, "replayed": True,
                                         "task_id": outcome.task_id}, 200), "replayed", event)
        # Another copy of this delivery is being enqueued right now; it answers for both.
        return _Answer(JSONResponse({"duplicate": True, "in_progress": True}, 409,
                                    headers={"Retry-After": "5"}), "in_progress", event)


async def _read_capped(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise _Reject(400, "bad_request", "bad Content-Length")
        if int(declared) > limit:
            raise _Reject(413, "too_large", f"body over {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():  # chunked bodies have no Content-Length to trust
        size += len(chunk)
        if size > limit:
            raise _Reject(413, "too_large", f"body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


# --- the app ------------------------------------------------------------------------------


def create_app(settings: BotSettings, *, enqueuer: Enqueuer | None = None,
               redis_client: redis.Redis | None = None,
               health_checks: Sequence[HealthCheck] = (),
               bot_login: str | None = DEFAULT_BOT_LOGIN,
               setup_env_path: Path | None = None,
               setup_token: str | None = None,
               run_store: RunStore | None = None) -> FastAPI:
    """The receiver. What it is given, the caller closes; what it creates, it closes.

    `health_checks` are probed by /healthz after Redis (the run store's database goes here).
    `setup_env_path` is where the GitHub App setup flow (`/`, `/setup`) writes credentials
    (None: the state directory's credentials file; never a path in a git work tree);
    `setup_token` is the one-time token that flow requires (made and logged when None).
    `run_store` turns on the run dashboard (/runs), run metrics and the database health check.
    Raises ValueError for a blank or short webhook secret.
    """
    problem = webhook_secret_problem(settings.webhook_secret)
    if problem:  # refused before anything is opened, so nothing is left to close
        raise ValueError(problem)
    owned: list[Callable[[], Any]] = []
    if redis_client is None:
        redis_client = redis_client_for(settings.redis_url)
        owned.append(redis_client.close)
    if enqueuer is None:
        celery_enqueuer = CeleryEnqueuer(settings.redis_url,
                                         settings.queue + CONTROL_QUEUE_SUFFIX)
        owned.append(celery_enqueuer.close)
        enqueuer = celery_enqueuer

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        for close in owned:
            close()

    app = FastAPI(title="frognano-bot receiver", lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.add_exception_handler(EarlyAnswer, send_early_answer)
    app.state.metrics = ReceiverMetrics()
    app.state.health_checks = [redis_health_check(redis_client), *health_checks]
    app.state.receiver = _Receiver(settings, enqueuer, DeliveryLedger(redis_client),
                                   app.state.metrics, bot_login)
    if run_store is not None:
        _add_run_views(app, settings, run_store, redis_client)
    app.state.setup = SetupFlow.start(settings, env_path=setup_env_path,
                                      setup_token=setup_token)
    app.include_router(setup_router)
    app.include_router(receiver_router)
    return app


receiver_router = APIRouter()


@receiver_router.post(WEBHOOK_PATH, include_in_schema=False)
async def receive_webhook(request: Request) -> Response:
    receiver: _Receiver = request.app.state.receiver
    return await receiver(request)


@receiver_router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    checks: list[HealthCheck] = request.app.state.health_checks
    metrics: ReceiverMetrics = request.app.state.metrics
    results = {check.name: await run_in_threadpool(_run_check, check) for check in checks}
    for name, result in results.items():
        metrics.health.labels(name).set(1 if result["ok"] else 0)
    healthy = all(result["ok"] for result in results.values())
    return JSONResponse({"status": "ok" if healthy else "unavailable", "checks": results},
                        200 if healthy else 503)


@receiver_router.get("/metrics")
async def metrics_endpoint(request: Request) -> Response:
    metrics: ReceiverMetrics = request.app.state.metrics
    # Off the event loop: the run metrics query the database at scrape time.
    body = await run_in_threadpool(generate_latest, metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def _add_run_views(app: FastAPI, settings: BotSettings, store: RunStore,
                   redis_client: redis.Redis) -> None:
    from bot.dashboard import dashboard_state
    from bot.dashboard import router as dashboard_router
    from bot.run_metrics import RunMetricsCollector

    queues = (settings.queue, settings.queue + CONTROL_QUEUE_SUFFIX)
    app.state.metrics.registry.register(RunMetricsCollector(
        store, lambda: {queue: int(redis_client.llen(queue)) for queue in queues}))
    app.state.health_checks.append(run_store_health_check(store))
    app.state.dashboard = dashboard_state(store, DashboardAuth.from_settings(settings))
    app.include_router(dashboard_router)
