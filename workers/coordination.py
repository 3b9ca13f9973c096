"""Per-issue coordination in Redis, atomic across hosts.

- generation: every accepted trigger gets the next number for its issue (once per
  delivery, even when the accept task is redelivered); a run whose generation is no
  longer the newest stops at its next step — the cooperative supersede.
- lock: one active run per issue, held with a TTL that a heartbeat keeps fresh, so
  a run on a worker that died is taken over after the TTL.
- done: a generation that finished is never run again (duplicate or late messages).
- cancel: a generation that runs nothing and records who asked; the run it makes stale
  ends as "cancelled" rather than "superseded".
"""

from __future__ import annotations

import threading
import time
from typing import Any

DELIVERY_TTL = 4 * 24 * 3600  # longer than GitHub's 3-day redelivery window
LOCK_TTL = 120
HEARTBEAT_SECONDS = 30
# A run that finds its issue's lock held waits this long (a superseded run lets go at its
# next step), then goes back to the broker for LOCK_RETRY_SECONDS (Celery's retry), so the
# worker takes other issues' runs meanwhile instead of sitting on the GPU.
LOCK_WAIT_SECONDS = 5.0
LOCK_RETRY_SECONDS = 10

_ASSIGN_GENERATION = """
local existing = redis.call('GET', KEYS[2])
if existing then return tonumber(existing) end
local generation = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[2], generation, 'EX', ARGV[1])
return generation
"""
_RELEASE_IF_OWNER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_REFRESH_IF_OWNER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


class IssueCoordinator:
    def __init__(self, redis: Any, issue_key: str) -> None:
        self.redis = redis
        self.issue_key = issue_key

    def _key(self, kind: str) -> str:
        return f"frognano:{kind}:{self.issue_key}"

    def assign_generation(self, delivery_id: str) -> int:
        return int(self.redis.eval(_ASSIGN_GENERATION, 2, self._key("generation"),
                                   f"frognano:delivery-generation:{delivery_id}",
                                   DELIVERY_TTL))

    def current_generation(self) -> int:
        return int(self.redis.get(self._key("generation")) or 0)

    def is_stale(self, generation: int) -> bool:
        return self.current_generation() > generation

    def mark_done(self, generation: int) -> None:
        self.redis.set(f"{self._key('done')}:{generation}", 1, ex=DELIVERY_TTL)

    def is_done(self, generation: int) -> bool:
        return bool(self.redis.exists(f"{self._key('done')}:{generation}"))

    def is_active(self) -> bool:
        """Whether the newest generation is queued or running (assigned, not finished)."""
        current = self.current_generation()
        return current > 0 and not self.is_done(current)

    def record_cancel(self, generation: int, by: str) -> None:
        self.redis.set(f"{self._key('cancel')}:{generation}", by, ex=DELIVERY_TTL)

    def cancelled_by(self, generation: int) -> str | None:
        value = self.redis.get(f"{self._key('cancel')}:{generation}")
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)

    def stop_reason(self) -> tuple[str, str | None]:
        """Why a stale run stops: ("cancelled", who) when the newest generation is a
        cancel, else ("superseded", None)."""
        by = self.cancelled_by(self.current_generation())
        return ("cancelled", by) if by is not None else ("superseded", None)

    def try_lock(self, generation: int) -> bool:
        return bool(self.redis.set(self._key("lock"), str(generation), nx=True, ex=LOCK_TTL))

    def lock_holder(self) -> int | None:
        value = self.redis.get(self._key("lock"))
        return int(value) if value is not None else None

    def refresh_lock(self, generation: int) -> bool:
        return bool(self.redis.eval(_REFRESH_IF_OWNER, 1, self._key("lock"), str(generation),
                                    LOCK_TTL))

    def release_lock(self, generation: int) -> None:
        self.redis.eval(_RELEASE_IF_OWNER, 1, self._key("lock"), str(generation))

    def wait_for_lock(self, generation: int, *, timeout: float | None = None,
                      poll: float = 0.5) -> str:
        """"acquired", "duplicate" (this generation already runs elsewhere), "stale"
        (a newer trigger arrived while waiting) or "timeout"."""
        deadline = time.monotonic() + (LOCK_WAIT_SECONDS if timeout is None else timeout)
        while True:
            if self.try_lock(generation):
                if self.is_stale(generation):
                    # Superseded before it began: starting would prepare a workspace and
                    # run the baseline tests only to stop at the first turn.
                    self.release_lock(generation)
                    return "stale"
                return "acquired"
            if self.lock_holder() == generation:
                return "duplicate"
            if self.is_stale(generation):
                return "stale"
            if time.monotonic() >= deadline:
                return "timeout"
            time.sleep(poll)

    def heartbeat(self, generation: int) -> Heartbeat:
        return Heartbeat(self, generation)


class Heartbeat:
    """Keeps the lock alive from a thread while a long tool call or test run blocks."""

    def __init__(self, coordinator: IssueCoordinator, generation: int) -> None:
        self._coordinator = coordinator
        self._generation = generation
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        name=f"heartbeat-{coordinator.issue_key}")

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self._coordinator.refresh_lock(self._generation)
            except Exception:  # a missed beat is retried; the TTL covers the gap
                continue

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
