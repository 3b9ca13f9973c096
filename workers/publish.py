"""Turning a passing run into a pushed branch and a draft PR, outside the sandbox.

The commit is made from the snapshot's tree in the run's host-owned git directory
(`solver/hostgit.py`); the workspace and its `.git` are never read here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from bot.github_api import GitHubApi, PullInfo, RepoRef
from bot.messages import CAREFUL_REVIEW_LABEL, NEEDS_REVIEW_LABEL
from solver.hostgit import GitError, HostRepo, Identity, Snapshot, run_git
from solver.policy import bot_identity, branch_for, forbidden_paths
from solver.verdict.verdict_run import Judgement
from workers.repo_cache import RepoCache

PUSH_ATTEMPTS = 3
PUSH_BACKOFF_SECONDS = 1.0

log = logging.getLogger(__name__)


def _current() -> bool:
    return True


class Stopped(Exception):
    """A newer generation (a cancel, or a newer trigger) arrived before a push: nothing
    was pushed. Checked right before every push attempt; once GitHub has accepted a push,
    a cancel is too late for it and the caller finishes the PR steps."""


def refuse_unsafe(snapshot: Snapshot) -> None:
    """Workflows, local actions and git plumbing are never pushed, whatever a caller
    decided."""
    unsafe = forbidden_paths(snapshot.paths, (), snapshot.links)
    if unsafe:
        raise GitError(f"refusing to push {', '.join(unsafe[:5])}: workflow or git "
                       "plumbing paths")


def _back_off(branch: str, failure: Exception, failures: int) -> None:
    wait = PUSH_BACKOFF_SECONDS * 2 ** (failures - 1)
    log.warning("push of %s failed (%s), retrying in %.0f s", branch, failure, wait)
    time.sleep(wait)


def _check(current: Callable[[], bool], branch: str) -> None:
    if not current():
        raise Stopped(f"a newer trigger arrived before the push of `{branch}`")


def push_with_retries(cache: RepoCache, host: HostRepo, url: str, commit: str, branch: str,
                      token: str, *, current: Callable[[], bool] = _current) -> None:
    """Force-push, again after a failure: a force-push is idempotent, and a dropped
    connection must not throw away a run whose tests passed. `current()` is asked before
    each attempt; False raises Stopped (nothing more is pushed), unless a failed attempt
    had landed after all (only its answer was lost): then the push is done, and the
    caller finishes the PR steps, as after any accepted push."""
    for attempt in range(1, PUSH_ATTEMPTS + 1):
        if attempt > 1 and not current() and _landed(cache, host, url, commit, branch, token):
            return
        _check(current, branch)
        try:
            cache.push(host.git_dir, url, commit, branch, token)
            return
        except GitError as exc:
            if attempt == PUSH_ATTEMPTS:
                raise
            _back_off(branch, exc, attempt)


def _landed(cache: RepoCache, host: HostRepo, url: str, commit: str, branch: str,
            token: str) -> bool:
    """Whether GitHub's `branch` already is `commit`."""
    try:
        return cache.fetch_branch(host.git_dir, url, branch, token) == commit
    except GitError:  # no such branch yet, or GitHub unreachable: not known to be there
        return False


class BranchMoved(GitError):
    """The PR branch moved during the run and the change does not apply on its new head."""


class ReplayFailed(Exception):
    """The change applies on the moved branch's new head, but the verdict on the merged
    tree refuses it: nothing was pushed."""

    def __init__(self, branch: str, head: str, judgement: Judgement) -> None:
        super().__init__(f"`{branch}` moved to {head[:12]} during the run and the tests "
                         "fail on the change replayed on it")
        self.branch, self.head, self.judgement = branch, head, judgement


# The verdict on a replayed tree: (the run's repository with the new head as its base, the
# merged tree) → the harness's judgement, as for the run itself (review_publish.py).
JudgeReplay = Callable[[HostRepo, str], Judgement]
MAX_REPLAYS = 2  # the branch moved again while the replay was being tested: once more


@dataclass(frozen=True)
class Pushed:
    commit: str  # what the branch now points at
    replayed_on: str | None = None  # the moved head the change was replayed on, if any
    judgement: Judgement | None = None  # the verdict on the replayed tree, if any


def push_on_top(*, github: GitHubApi, cache: RepoCache, repo: RepoRef, host: HostRepo,
                snapshot: Snapshot, branch: str, message: str, judge_replay: JudgeReplay,
                current: Callable[[], bool] = _current) -> Pushed:
    """Commit the snapshot on the PR head the run started from and push it without force.

    If someone pushed to the branch meanwhile, the change is replayed on the new head by
    a three-way merge in the host-owned git directory (never in the sandbox) and the
    merged tree goes through the verdict again (`judge_replay`): nothing is pushed that
    was not tested as pushed. A conflict raises BranchMoved, a refused replay
    ReplayFailed. A push that failed without the branch moving (a dropped connection) is
    tried again, up to PUSH_ATTEMPTS. `current()` is asked right before every push
    attempt: False raises Stopped and nothing (more) is pushed."""
    refuse_unsafe(snapshot)  # every caller checks first: the last line before a push
    identity = bot_identity(github.bot_login())
    commit = host.commit(snapshot.tree, branch, message, identity=identity)
    url = github.clone_url(repo)
    parent, replayed_on, judged = host.base, None, None
    failures = replays = 0
    while True:
        _check(current, branch)
        try:
            cache.push(host.git_dir, url, commit, branch, github.installation_token(repo),
                       force=False)
            return Pushed(commit, replayed_on, judged)
        except GitError as exc:
            failure = exc
        head = cache.fetch_branch(host.git_dir, url, branch, github.installation_token(repo))
        if head == commit:  # it went through; only the answer was lost
            return Pushed(commit, replayed_on, judged)
        if head == parent:  # the branch did not move: the push itself failed
            failures += 1
            if failures >= PUSH_ATTEMPTS:
                raise failure
            _back_off(branch, failure, failures)
            continue
        replays += 1
        if replays > MAX_REPLAYS:
            raise BranchMoved(f"`{branch}` kept moving during the run (now at {head[:12]}); "
                              "nothing was pushed")
        log.info("fast-forward push of %s refused (%s); replaying on %s", branch, failure,
                 head[:12])
        commit, judged = _replay(host, head, commit, branch, message, identity, judge_replay)
        parent = replayed_on = head


def _replay(host: HostRepo, head: str, commit: str, branch: str, message: str,
            identity: Identity, judge_replay: JudgeReplay) -> tuple[str, Judgement]:
    """The change of `commit` (over its one parent) merged onto `head`, judged, and
    committed there; BranchMoved on a conflict, ReplayFailed when the verdict refuses it.

    The merge's base is that parent, always. git's own merge base is it only while `head`
    descends from it: a person who rewrote the branch (dropped a commit that leaked a
    credential, then force-pushed) gave an older one, and the merge brought back what the
    rewrite dropped. `merge-tree --merge-base` names the base but needs git 2.40, so two
    commits made here on one root holding the parent's tree give merge-tree that base;
    a rebase of the branch still replays cleanly."""
    name, email = identity
    who = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
           "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}

    def made(tree: str, *parents: str) -> str:
        flags = [arg for parent in parents for arg in ("-p", parent)]
        return run_git("commit-tree", tree, *flags, "-m", "frognano replay base",
                       git_dir=host.git_dir, env=who).decode().strip()

    root = made(f"{commit}^^{{tree}}")
    ours, theirs = made(f"{head}^{{tree}}", root), made(f"{commit}^{{tree}}", root)
    try:
        tree = run_git("merge-tree", "--write-tree", "--no-messages", ours, theirs,
                       git_dir=host.git_dir).decode().split("\n", 1)[0].strip()
    except GitError as exc:  # exit status 1: a conflict
        log.info("replay of the change on %s failed: %s", head[:12], exc)
        raise BranchMoved(f"`{branch}` moved to {head[:12]} during the run and the change "
                          "conflicts with it") from exc
    at_head = HostRepo(host.git_dir, host.work_tree, head, max_diff_bytes=host.max_diff_bytes)
    if host.distrusted is not None:  # the bot's own test edits stay untrusted on the new head
        at_head.distrust(*host.distrusted)
    judgement = judge_replay(at_head, tree)
    if not judgement.verdict.accepted:
        raise ReplayFailed(branch, head, judgement)
    return at_head.commit(tree, branch, message, identity=identity), judgement


def push_and_open_pull(*, github: GitHubApi, cache: RepoCache, repo: RepoRef, host: HostRepo,
                       snapshot: Snapshot, issue_number: int, title: str, body: str,
                       base: str, message: str, reviewer: str,
                       current: Callable[[], bool] = _current,
                       careful: bool = False) -> PullInfo:
    """Commit the snapshot's tree, force-push `frognano/issue-N`, then open or update its
    one draft PR. `current()` is asked before each push attempt (Stopped: nothing was
    pushed, no PR step ran); after an accepted push, the PR steps always finish. A
    `careful` change (flagged by the change scan) is labelled needs-careful-review too."""
    api = github
    branch = branch_for(issue_number)
    refuse_unsafe(snapshot)  # every caller checks first: the last line before a push
    commit = host.commit(snapshot.tree, branch, message, identity=bot_identity(api.bot_login()))
    # Minted just before use: the clone's token may have expired during a long run.
    push_with_retries(cache, host, api.clone_url(repo), commit, branch,
                      api.installation_token(repo), current=current)
    existing = api.find_open_pull(repo, branch)
    if existing is not None:
        pull = api.update_pull(repo, existing.number, title=title, body=body)
    else:
        pull = api.open_draft_pull(repo, title=title, body=body, head=branch, base=base)
    api.ensure_label(repo, NEEDS_REVIEW_LABEL, "d93f0b",
                     "Opened by FrogNano: a person must review it before merging")
    api.add_labels(repo, pull.number, [NEEDS_REVIEW_LABEL])
    if careful:
        label_careful(api, repo, pull.number)
    api.request_review(repo, pull.number, [reviewer])
    return pull


def label_careful(api: GitHubApi, repo: RepoRef, number: int) -> None:
    """A change the scan flagged ("Read this first" in its body): a label a maintainer
    can filter on, since the tests passing says nothing about those lines."""
    api.ensure_label(repo, CAREFUL_REVIEW_LABEL, "b60205",
                     "FrogNano's change holds code no test run tells from a fix: read "
                     "\"Read this first\"")
    api.add_labels(repo, number, [CAREFUL_REVIEW_LABEL])
