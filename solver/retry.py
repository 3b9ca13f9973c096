"""The project's one back-off loop: try, wait longer after each failure, give up after N.

Each caller keeps its own policy as data (`Backoff`: how many tries, the first wait, the
cap, which exceptions are worth another try) and its own meaning of a failure: the GitHub
client (bot/github_client.py), the pushes (workers/publish/), the model server's client
(solver/models/openai_compat.py). Standard library only, so any layer may import it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class Transient(Exception):
    """A failure worth another try, for a caller whose failure is not an exception of its
    own (a 5xx answer, a dropped connection): `reason` names it in the log and in the
    caller's final error; `wait` is the server's own hint (Retry-After), still capped by
    the policy; `status` the HTTP status, if any."""

    def __init__(self, reason: str, *, wait: float | None = None,
                 status: int | None = None) -> None:
        super().__init__(reason)
        self.reason, self.wait, self.status = reason, wait, status


@dataclass(frozen=True)
class Backoff:
    """How a caller retries. The wait before try k + 1 is `first_wait * 2 ** (k - 1)`
    (or a `Transient`'s own `wait`), never more than `max_wait`."""

    tries: int  # in all, the first included (at least one is made)
    first_wait: float  # seconds before the second try; doubled before each next one
    retry_on: tuple[type[BaseException], ...] = (Transient,)  # what is worth another try
    max_wait: float = math.inf

    def wait_after(self, failures: int, hint: float | None = None) -> float:
        """The wait after the `failures`-th failed try in a row."""
        wait = self.first_wait * 2 ** (failures - 1) if hint is None else hint
        return max(0.0, min(wait, self.max_wait))


def with_backoff(try_once: Callable[[int], T], policy: Backoff, *, what: str,
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """`try_once(1)`, then `try_once(2)`, ... until one returns, and that result. An
    exception in `policy.retry_on` is followed by a wait and the next try; on the last
    try it is raised as it is, so the caller words the final error. Any other exception
    ends the loop at once. `try_once` gets the try's number, to do what only a retry
    needs (look whether a failed try had succeeded after all)."""
    tries = max(1, policy.tries)
    for number in range(1, tries + 1):
        try:
            return try_once(number)
        except policy.retry_on as failure:
            if number == tries:
                raise
            hint = failure.wait if isinstance(failure, Transient) else None
            wait = policy.wait_after(number, hint)
            log.warning("%s: %s, retrying in %.1f s (try %d of %d)", what,
                        failure.reason if isinstance(failure, Transient) else failure,
                        wait, number, tries)
            sleep(wait)
    raise AssertionError("unreachable: the last try returns or raises")
