"""Hand a Trigger to the workers through the broker, by task name (no import of workers/)."""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Literal, Protocol

import redis
from celery import Celery
from kombu.exceptions import KombuError, OperationalError

from bot.triggers import ACCEPT_TASK, Trigger

log = logging.getLogger(__name__)

# A down broker must turn into a 503 within ~1-2 s, well inside GitHub's 10 s, not hang.
CONNECT_TIMEOUT_S = 1.0
# One immediate retry lets a pooled connection that died with a Redis restart reconnect.
PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2,
                        "interval_max": 0.2}


class EnqueueError(RuntimeError):
    """The broker did not take the task; nothing was queued (answered with 503)."""


class Enqueuer(Protocol):
    def enqueue(self, trigger: Trigger) -> str:
        """Queue the accept task for `trigger`; return its task id or raise EnqueueError."""
        ...


def task_id_for(trigger: Trigger) -> str:
    # Derived from the delivery, so a second enqueue of one delivery (after a crash between
    # enqueue and recording it) carries the same id and the worker can drop it.
    return f"delivery-{trigger.delivery_id}"


class CeleryEnqueuer:
    """Publishes `ACCEPT_TASK` with a bare Celery client; it never runs tasks itself."""

    def __init__(self, broker_url: str, queue: str) -> None:
        self.queue = queue
        self._celery = Celery("frognano-receiver", broker=broker_url, set_as_current=False)
        self._celery.conf.update(
            broker_connection_timeout=CONNECT_TIMEOUT_S,
            broker_transport_options={
                "socket_connect_timeout": CONNECT_TIMEOUT_S,
                "socket_timeout": CONNECT_TIMEOUT_S,
            },
            task_default_queue=queue,
            task_serializer="json",
        )

    def enqueue(self, trigger: Trigger) -> str:
        try:
            result = self._celery.send_task(
                ACCEPT_TASK, kwargs=trigger.to_kwargs(), queue=self.queue,
                task_id=task_id_for(trigger), retry=True,
                retry_policy=PUBLISH_RETRY_POLICY)
        except (OperationalError, KombuError, redis.RedisError, OSError) as exc:
            raise EnqueueError(f"broker did not accept the task: {exc}") from exc
        return str(result.id)

    def close(self) -> None:
        self._celery.close()


# --- exactly once per delivery ------------------------------------------------------------

# GitHub lets a delivery be redelivered for 3 days; remember it a day longer.
DONE_TTL_S = 4 * 24 * 3600
# Longer than any enqueue try; if the receiver dies mid-enqueue the claim lapses and a
# redelivery can try again.
CLAIM_TTL_S = 30
# How long a concurrent copy of a delivery waits for the first copy to finish.
CLAIM_WAIT_S = 2.0
_POLL_S = 0.02
_DONE_PREFIX = b"done:"
# Delete the claim only if it is still ours (it may have lapsed and been taken by another).
_RELEASE_SCRIPT = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class DeliveryLedger:
    """Which deliveries were enqueued, in Redis: claimed (short TTL) then done (4 days).

    It also remembers which delivery first brought each signed body. The signature covers
    the body only, not the X-GitHub-Delivery header, so a captured delivery can be sent
    again under a fresh id; GitHub's own redeliveries keep the id, and two real events
    never share a body (they differ at least in `updated_at` or the comment id).
    """

    def __init__(self, client: redis.Redis, prefix: str = "frognano:delivery:",
                 body_prefix: str = "frognano:body:") -> None:
        self._client = client
        self._prefix = prefix
        self._body_prefix = body_prefix
        self._release = client.register_script(_RELEASE_SCRIPT)

    def first_delivery_of(self, body_digest: str, delivery_id: str) -> str:
        """The delivery that first brought this body: `delivery_id` when none did before."""
        key = self._body_prefix + body_digest
        if self._client.set(key, delivery_id, nx=True, ex=DONE_TTL_S):
            return delivery_id
        first = self._client.get(key)
        if first is None:  # lapsed between the two calls
            return delivery_id
        return first.decode() if isinstance(first, bytes) else str(first)

    def key(self, delivery_id: str) -> str:
        return self._prefix + delivery_id

    def claim(self, delivery_id: str, token: str) -> bool:
        return bool(self._client.set(self.key(delivery_id), "claim:" + token, nx=True,
                                     ex=CLAIM_TTL_S))

    def release(self, delivery_id: str, token: str) -> None:
        self._release(keys=[self.key(delivery_id)], args=["claim:" + token])

    def mark_done(self, delivery_id: str, task_id: str) -> None:
        self._client.set(self.key(delivery_id), _DONE_PREFIX + task_id.encode(), ex=DONE_TTL_S)

    def done_task_id(self, delivery_id: str) -> tuple[bool, str | None]:
        """(whether any record exists, the task id when the delivery is done)."""
        value = self._client.get(self.key(delivery_id))
        if value is None:
            return False, None
        raw = value if isinstance(value, bytes) else str(value).encode()
        if raw.startswith(_DONE_PREFIX):
            return True, raw[len(_DONE_PREFIX):].decode()
        return True, None


@dataclass(frozen=True)
class EnqueueOutcome:
    status: Literal["queued", "duplicate", "in_progress", "replayed"]
    task_id: str | None = None


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def enqueue_once(ledger: DeliveryLedger, enqueuer: Enqueuer, trigger: Trigger, *,
                 signed_body_digest: str | None = None,
                 wait_s: float = CLAIM_WAIT_S) -> EnqueueOutcome:
    """Enqueue `trigger` unless its delivery was already enqueued (blocking; run in a thread).

    With `signed_body_digest`, a body first seen under another delivery id is a replay:
    nothing is queued ("replayed", with the first delivery's task id when it has one).
    Raises redis.RedisError or EnqueueError when nothing could be queued; then no record of
    the delivery is left behind except, at worst, a claim that lapses after CLAIM_TTL_S
    (and the body's first delivery, which is this one, so its redelivery still goes on).
    """
    delivery_id = trigger.delivery_id
    if signed_body_digest is not None:
        first = ledger.first_delivery_of(signed_body_digest, delivery_id)
        if first != delivery_id:
            log.warning("signed body first delivered as %s came again as %s: a replay, "
                        "nothing queued", first, delivery_id)
            return EnqueueOutcome("replayed", ledger.done_task_id(first)[1])
    token = uuid.uuid4().hex
    deadline = time.monotonic() + wait_s
    while not ledger.claim(delivery_id, token):
        exists, task_id = ledger.done_task_id(delivery_id)
        if task_id is not None:
            return EnqueueOutcome("duplicate", task_id)
        if exists:  # another copy holds the claim: wait for its result
            if time.monotonic() >= deadline:
                return EnqueueOutcome("in_progress")
            time.sleep(_POLL_S)
        # else: the claim was released between our SET and GET; try to take it
    try:
        task_id = enqueuer.enqueue(trigger)
    except BaseException:
        try:
            ledger.release(delivery_id, token)
        except redis.RedisError:
            log.warning("could not release the claim; it lapses in %d s", CLAIM_TTL_S)
        raise
    try:
        ledger.mark_done(delivery_id, task_id)
    except redis.RedisError:
        # The task is queued, so this is still a success; a redelivery after the claim
        # lapses would queue it again under the same task id, which the worker drops.
        log.exception("task queued but the delivery could not be recorded")
    return EnqueueOutcome("queued", task_id)
