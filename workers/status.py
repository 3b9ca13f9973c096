"""The one status comment per issue, found by its marker and edited in place."""

from __future__ import annotations

import dataclasses
import threading
import time

from bot.github_api import GitHubApi, RepoRef
from bot.messages import (
    STATUS_MARKER,
    AttemptProgress,
    status_running,
    status_running_attempts,
)
from workers.agent.events import Event, TurnStarted
from workers.attempts import AttemptEnded, AttemptStarted


class StatusComment:
    def __init__(self, github: GitHubApi, repo: RepoRef, issue_number: int,
                 min_interval: float = 0.0) -> None:
        self.github = github
        self.repo = repo
        self.issue_number = issue_number
        self.min_interval = min_interval
        self._id: int | None = None
        self._last_edit = 0.0
        self._last_body = ""

    def _find(self) -> int | None:
        bot = self.github.bot_login()
        for comment in reversed(self.github.comments(self.repo, self.issue_number)):
            if comment.author == bot and STATUS_MARKER in comment.body:
                return comment.id
        return None

    def set(self, body: str, *, force: bool = True) -> None:
        """Show `body`; progress updates pass force=False and are throttled."""
        now = time.monotonic()
        if body == self._last_body or (not force and now - self._last_edit < self.min_interval):
            return
        if self._id is None:
            self._id = self._find()
        if self._id is None:
            self._id = self.github.comment(self.repo, self.issue_number, body)
        else:
            self.github.edit_comment(self.repo, self._id, body)
        self._last_edit, self._last_body = now, body


class StatusProgress:
    """The status comment as an output of a run's events: the step count, throttled.

    With several attempts (workers/attempts.py) each one's own step is shown. The events
    do not say whose they are, but an attempt runs in one thread from its `AttemptStarted`
    to its `AttemptEnded` (run_attempts' `one`), so the emitting thread tells. The attempts
    hand their events over one at a time (run_attempts' lock), so no lock here."""

    def __init__(self, status: StatusComment, max_steps: int, attempt: int) -> None:
        self.status, self.max_steps, self.attempt = status, max_steps, attempt
        self._of = 0
        self._thread_attempt: dict[int, int] = {}  # thread id → attempt index
        self._attempts: dict[int, AttemptProgress] = {}  # by index, once started

    def emit(self, event: Event) -> None:
        if isinstance(event, AttemptStarted):
            self._of = event.of
            self._thread_attempt[threading.get_ident()] = event.index
            self._attempts[event.index] = AttemptProgress(event.index + 1)
        elif isinstance(event, AttemptEnded):
            self._thread_attempt.pop(threading.get_ident(), None)
            self._attempts[event.index] = dataclasses.replace(
                self._attempts[event.index], ended=event.exit_reason)
        elif isinstance(event, TurnStarted):
            index = self._thread_attempt.get(threading.get_ident())
            if index is None:  # a run of one attempt
                self.status.set(status_running(event.step, self.max_steps, self.attempt),
                                force=False)
                return
            self._attempts[index] = dataclasses.replace(self._attempts[index],
                                                        step=event.step)
        else:
            return
        self.status.set(status_running_attempts(list(self._attempts.values()), self._of,
                                                self.max_steps, self.attempt), force=False)
