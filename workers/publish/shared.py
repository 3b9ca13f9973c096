"""What a first run's and a review's publishing share: the checks right before a push,
the push's retry policy, the careful-review label, and the status once published."""

from __future__ import annotations

from collections.abc import Callable

from bot.github_api import GitHubApi, RepoRef, ServerError
from bot.messages import CAREFUL_REVIEW_LABEL
from solver.hostgit import GitError, Snapshot
from solver.policy import forbidden_paths
from solver.retry import Backoff
from workers.context import RunContext

# A failed push (the ref write on GitHub, or a fetch around it) is tried twice more, after
# 1 s and 2 s: a forced ref write is idempotent, and a push on top is first checked
# against the branch's head (review.push_on_top). A 5xx or a lost answer is a ServerError
# (the ref writes make one try each: the loop asks about a cancel before the next).
PUSH_RETRY = Backoff(tries=3, first_wait=1.0, retry_on=(GitError, ServerError))


def always_current() -> bool:
    return True


class Stopped(Exception):
    """A newer generation (a cancel, or a newer trigger) arrived before a push: nothing
    was pushed. Checked right before every push try; once GitHub has accepted a push,
    a cancel is too late for it and the caller finishes the PR steps."""


def refuse_unsafe(snapshot: Snapshot) -> None:
    """Workflows, local actions and git plumbing are never pushed, whatever a caller
    decided."""
    unsafe = forbidden_paths(snapshot.paths, (), snapshot.links)
    if unsafe:
        raise GitError(f"refusing to push {', '.join(unsafe[:5])}: workflow or git "
                       "plumbing paths")


def check_current(current: Callable[[], bool], branch: str) -> None:
    """Stopped unless the run is still the issue's newest generation."""
    if not current():
        raise Stopped(f"a newer trigger arrived before the push of `{branch}`")


def label_careful(api: GitHubApi, repo: RepoRef, number: int) -> None:
    """A change the scan flagged ("Read this first" in its body): a label a maintainer
    can filter on, since the tests passing says nothing about those lines."""
    api.ensure_label(repo, CAREFUL_REVIEW_LABEL, "b60205",
                     "FrogNano's change holds code no test run tells from a fix: read "
                     "\"Read this first\"")
    api.add_labels(repo, number, [CAREFUL_REVIEW_LABEL])


def stopped(ctx: RunContext) -> str:
    """Nothing was pushed: a cancel says so (a progress edit may have landed after the
    cancel's own); a superseding run owns the status comment."""
    outcome, reason = ctx.coordinator.stop_reason()
    if reason is not None:
        ctx.status.cancelled(reason)
    return outcome


def published(ctx: RunContext, where: str, setup_note: str = "") -> None:
    """The status once the PR steps are done; a cancel that arrived after GitHub accepted
    the push is named as too late. A newer trigger's "queued" stays: it runs next, on
    this push. `setup_note`: the branch edits what setup reads, which was not installed
    (solver's not_installed_note)."""
    if ctx.is_current():
        ctx.status.done(where, setup_note)
        return
    late, reason = ctx.coordinator.stop_reason()
    if late == "cancelled" and reason is not None:
        ctx.status.pushed_after_cancel(where, reason)
