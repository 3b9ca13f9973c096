"""The one status comment per issue, found by its marker and edited in place.

Every write of it goes through `RunStatus`, whose methods say what the comment says now
(queued, preparing, failed, cancelled, done); the run's progress goes through
`StatusProgress`. No other module builds a status body."""

from __future__ import annotations

import dataclasses
import time

from bot.github_api import GitHubApi, RepoRef
from bot.markdown import escape_text
from bot.messages import (
    STATUS_MARKER,
    CandidateProgress,
    status_cancelled,
    status_done,
    status_failed,
    status_pushed_after_cancel,
    status_queued,
    status_running,
    status_running_candidates,
)
from bot.triggers import Trigger
from solver.agent.run_events import Event, TurnStarted
from solver.best_of import CandidateEnded, CandidateOfThread, CandidateStarted


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


class RunStatus:
    """What one run (its generation) says in the issue's status comment, by name."""

    def __init__(self, comment: StatusComment, generation: int) -> None:
        self.comment, self.generation = comment, generation

    @classmethod
    def of(cls, github: GitHubApi, trigger: Trigger, generation: int,
           min_interval: float = 0.0) -> RunStatus:
        """The status of `trigger`'s issue; progress edits at most every `min_interval`."""
        return cls(StatusComment(github, trigger.repo_ref, trigger.issue_number,
                                 min_interval), generation)

    def queued(self, position: int | None) -> None:
        self.comment.set(status_queued(position, self.generation))

    def preparing(self) -> None:
        self.comment.set(status_running(0, 0, self.generation, "preparing the workspace"))

    def progress(self, max_steps: int) -> StatusProgress:
        """The output of the run's events that shows its steps (throttled)."""
        return StatusProgress(self.comment, max_steps, self.generation)

    def failed(self, summary: str) -> None:
        self.comment.set(status_failed(summary, self.generation))

    def cancelled(self, reason: str) -> None:
        self.comment.set(status_cancelled(reason, self.generation))

    def done(self, where: str, setup_note: str = "") -> None:
        """The PR (or branch) the run published. `setup_note`: the branch edits what
        setup reads, which was not installed (solver's not_installed_note); its paths
        are the model's, so escaped."""
        extra = f"\n\n⚠️ {escape_text(setup_note)}" if setup_note else ""
        self.comment.set(status_done(where, self.generation) + extra)

    def pushed_after_cancel(self, where: str, reason: str) -> None:
        self.comment.set(status_pushed_after_cancel(where, self.generation, reason))


class StatusProgress:
    """The status comment as an output of a run's events: the step count, throttled. With
    several candidates (solver/run.py) each started one shows its own step, or how it
    ended. The candidates hand their events over one at a time
    (solver.best_of.LockedOutput)."""

    def __init__(self, status: StatusComment, max_steps: int, run_number: int) -> None:
        self.status, self.max_steps, self.run_number = status, max_steps, run_number
        self._of = 0
        self._whose = CandidateOfThread()
        self._candidates: dict[int, CandidateProgress] = {}  # by index, once started

    def emit(self, event: Event) -> None:
        # Only a turn edits the comment, as with one candidate: a candidate's start or end
        # shows with the next turn of any. An edit on an end could land after a newer
        # run's "queued" (a superseded run stops there) and hide it.
        index = self._whose.see(event)
        if isinstance(event, CandidateStarted):
            self._of = event.of
            self._candidates[event.index] = CandidateProgress(event.index + 1)
        elif isinstance(event, CandidateEnded):
            self._candidates[event.index] = dataclasses.replace(
                self._candidates[event.index], ended=event.exit_reason)
        elif not isinstance(event, TurnStarted):
            return
        elif index is None:  # a run of one candidate
            self.status.set(status_running(event.step, self.max_steps, self.run_number),
                            force=False)
        else:
            self._candidates[index] = dataclasses.replace(self._candidates[index],
                                                          step=event.step)
            self.status.set(status_running_candidates(
                list(self._candidates.values()), self._of, self.max_steps, self.run_number),
                force=False)
