"""One run of one issue as every step of the GitHub side sees it, as Probot's `context`:
who and what triggered it, which generation it is, where it reports, how it learns it
was superseded or cancelled. Built once by run_issue; handed to publishing."""

from __future__ import annotations

from dataclasses import dataclass

from bot.github_api import GitHubApi, RepoRef
from bot.triggers import Trigger
from workers.coordination import IssueCoordinator
from workers.run_recording import RunRecorder
from workers.runtime import Runtime
from workers.status import RunStatus


@dataclass(frozen=True)
class RunContext:
    runtime: Runtime
    trigger: Trigger
    generation: int  # this run's place among the issue's triggers
    coordinator: IssueCoordinator  # the issue's lock, generations and cancels
    status: RunStatus  # the issue's status comment, as this run writes it
    recorder: RunRecorder  # the run record (RunRecorder.start(None): none is kept)

    @property
    def github(self) -> GitHubApi:
        return self.runtime.github

    @property
    def repo(self) -> RepoRef:
        return self.trigger.repo_ref

    def is_current(self) -> bool:
        """Whether this run is still the issue's newest generation (no newer trigger, no
        cancel): asked before every push."""
        return not self.coordinator.is_stale(self.generation)
