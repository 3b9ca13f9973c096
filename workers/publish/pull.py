"""A first run's publishing: its commit made on GitHub (signed), `frognano/issue-N`
pointed at it, its one draft PR opened or updated, labelled, a review asked for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.github_api import GitHubApi, PullInfo, RepoRef
from bot.messages import NEEDS_REVIEW_LABEL, UNVERIFIED_LABEL
from solver.hostgit import HostRepo, Snapshot
from solver.policy import branch_for, not_installed_note
from solver.retry import with_backoff
from workers.context import RunContext
from workers.publish.api_commit import create_commit, force_branch, know_pushed
from workers.publish.shared import (
    PUSH_RETRY,
    Stopped,
    always_current,
    check_current,
    label_careful,
    published,
    refuse_unsafe,
    stopped,
)
from workers.repo_cache import RepoCache


@dataclass(frozen=True, kw_only=True)
class DraftPull:
    """What a first run publishes besides its tree."""

    title: str
    body: str
    base: str  # the branch the PR goes into (the default branch)
    message: str  # the commit's
    careful: bool = False  # the change scan flagged it: labelled needs-careful-review too
    unverified: bool = False  # no test fails without the change: labelled so


def publish_pull(ctx: RunContext, host: HostRepo, snapshot: Snapshot, draft: DraftPull
                 ) -> str:
    """A first run's passing change: its commit on GitHub, `frognano/issue-N` moved to it
    (by force), the draft PR opened or updated, review requested. Outcomes: pr_opened;
    cancelled or superseded (a newer generation before the push: nothing pushed, no PR
    step)."""
    try:
        pull = push_and_open_pull(ctx.github, ctx.runtime.repo_cache, ctx.repo, host,
                                  snapshot, ctx.trigger.issue_number, draft,
                                  reviewer=ctx.trigger.actor, current=ctx.is_current)
    except Stopped:
        return stopped(ctx)
    ctx.recorder.set_pr_url(pull.url)
    published(ctx, pull.url, not_installed_note(host, snapshot.paths))
    return "pr_opened"


def push_and_open_pull(api: GitHubApi, cache: RepoCache, repo: RepoRef, host: HostRepo,
                       snapshot: Snapshot, issue_number: int, draft: DraftPull, *,
                       reviewer: str, current: Callable[[], bool] = always_current
                       ) -> PullInfo:
    """Commit the snapshot's tree on GitHub (signed by it: api_commit.py), point
    `frognano/issue-N` at it (forced: the bot owns the branch), then open or update its
    one draft PR. `current()` is asked before each try of the ref write (Stopped: nothing
    was pushed, no PR step ran); after an accepted one, the PR steps always finish."""
    branch = branch_for(issue_number)
    refuse_unsafe(snapshot)  # every caller checks first: the last line before an upload
    commit = create_commit(api, repo, host, tree=snapshot.tree, parent=host.base,
                           message=draft.message)
    push_with_retries(api, repo, commit, branch, current=current)
    know_pushed(cache, host, api, repo, branch, commit)
    existing = api.find_open_pull(repo, branch)
    if existing is not None:
        pull = api.update_pull(repo, existing.number, title=draft.title, body=draft.body)
    else:
        pull = api.open_draft_pull(repo, title=draft.title, body=draft.body, head=branch,
                                   base=draft.base)
    api.ensure_label(repo, NEEDS_REVIEW_LABEL, "d93f0b",
                     "Opened by FrogNano: a person must review it before merging")
    api.add_labels(repo, pull.number, [NEEDS_REVIEW_LABEL])
    if draft.careful:
        label_careful(api, repo, pull.number)
    if draft.unverified:
        api.ensure_label(repo, UNVERIFIED_LABEL, "fbca04",
                         "No test fails without FrogNano's change: the fix is unverified")
        api.add_labels(repo, pull.number, [UNVERIFIED_LABEL])
    elif existing is not None:  # a new run's change shows its evidence: the label goes
        api.remove_label(repo, pull.number, UNVERIFIED_LABEL)
    api.request_review(repo, pull.number, [reviewer])
    return pull


def push_with_retries(api: GitHubApi, repo: RepoRef, commit: str, branch: str, *,
                      current: Callable[[], bool] = always_current) -> None:
    """Point `branch` at `commit` (created, or moved by force), again after a failure
    (PUSH_RETRY): a forced ref write is idempotent, and a dropped connection must not
    throw away a run whose tests passed. `current()` is asked before each try; False
    raises Stopped (nothing more is pushed), unless a failed try had landed after all
    (only its answer was lost): then the push is done, and the caller finishes the PR
    steps, as after any accepted push."""

    def try_once(number: int) -> None:
        if number > 1 and not current() and api.branch_head(repo, branch) == commit:
            return
        check_current(current, branch)
        force_branch(api, repo, branch, commit)

    with_backoff(try_once, PUSH_RETRY, what=f"push of {branch}")
