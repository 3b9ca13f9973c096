"""A review run's publishing: its change goes on top of the PR branch's head without
force, replayed and judged again when someone pushed meanwhile; then the reply and the
PR body's test report."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

from bot.github_api import GitHubApi, NotFastForward, NotFound, RepoRef, ServerError
from bot.messages import (
    RunReport,
    pr_body,
    review_not_pushed,
    review_pushed,
    review_replay_failed,
)
from solver.agent.result import SolveResult
from solver.agent.run_events import EventOutput
from solver.hostgit import GitError, HostRepo, Identity, Snapshot, run_git
from solver.policy import bot_identity, branch_for, not_installed_note
from solver.replay import JudgeReplay, Replay
from solver.retry import Backoff, Transient, with_backoff
from solver.verdict.verdict_run import Judgement
from workers.context import RunContext
from workers.publish.api_commit import create_commit, know_pushed
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

log = logging.getLogger(__name__)


class BranchMoved(GitError):
    """The PR branch moved during the run and the change does not apply on its new head."""


class BranchTaken(Exception):
    """A CI repair round's branch moved during the round to a commit the round did not
    start from (a person's push, or a rewrite of the branch): no person asked for the
    round, so nothing is pushed on that commit; `head` is it (None: the branch is gone)."""

    def __init__(self, branch: str, head: str | None) -> None:
        super().__init__(f"`{branch}` moved to {head[:12] if head else 'nothing'} during "
                         "the CI repair round")
        self.branch, self.head = branch, head


class ReplayFailed(Exception):
    """The change applies on the moved branch's new head, but the verdict on the merged
    tree refuses it: nothing was pushed."""

    def __init__(self, branch: str, head: str, judgement: Judgement) -> None:
        super().__init__(f"`{branch}` moved to {head[:12]} during the run and the tests "
                         "fail on the change replayed on it")
        self.branch, self.head, self.judgement = branch, head, judgement


MAX_REPLAYS = 2  # the branch moved again while the replay was being tested: once more


@dataclass(frozen=True, kw_only=True)
class ReviewChange:
    """What a review run publishes besides its tree."""

    title: str  # the PR's
    message: str  # the commit's
    # The run's verdict again, on the change replayed on a moved head (solver/replay.py:
    # the run's sandbox recipe, its services and package index with it).
    replay: Replay
    events: EventOutput  # the run's transcript and record: they hear each replay's re-run
    # The reply once pushed, (commit, tests after it, the head replayed on) → text; None:
    # a review's (a CI repair says which checks it answers: workers/ci_repair.py).
    reply: Callable[[str, str, str | None], str] | None = None
    # A CI repair round's: the branch moved to a commit the round did not start from
    # (its new head, None: deleted) → the run's outcome, said on the PR. None: a review's
    # change is replayed on the moved branch, a person asked for it.
    taken: Callable[[str | None], str] | None = None


def publish_review(ctx: RunContext, host: HostRepo, result: SolveResult, report: RunReport,
                   change: ReviewChange) -> str:
    """A review's passing change: a new commit on the PR branch, a reply, the PR body's
    test report updated. Outcomes: pushed; conflict or replay_failed (the branch moved
    and the change does not apply, or fails the tests on it: a comment, the branch as it
    was); cancelled or superseded (a newer generation before the push: nothing pushed)."""
    branch = branch_for(ctx.trigger.issue_number)
    pull_number = ctx.trigger.pull_number or ctx.trigger.issue_number
    assert result.snapshot is not None  # decide() publishes only a readable change
    try:
        pushed = push_on_top(
            github=ctx.github, cache=ctx.runtime.repo_cache, repo=ctx.repo, host=host,
            snapshot=result.snapshot, branch=branch, message=change.message,
            judge_replay=change.replay.judge(change.events),
            current=ctx.is_current, replay=change.taken is None)
    except Stopped:
        return stopped(ctx)
    except BranchTaken as exc:
        assert change.taken is not None  # raised only when nothing may be replayed
        return change.taken(exc.head)
    except BranchMoved as exc:
        ctx.github.comment(ctx.repo, pull_number, review_not_pushed(str(exc)))
        ctx.status.failed(str(exc))
        return "conflict"
    except ReplayFailed as exc:
        final = exc.judgement.final
        ctx.github.comment(ctx.repo, pull_number, review_replay_failed(
            branch, exc.head, exc.judgement.verdict.reasons, final.output))
        ctx.status.failed(f"{exc}; nothing was pushed")
        return "replay_failed"
    if pushed.judgement is not None:  # the report describes the tree that was pushed
        report = _replayed_report(report, pushed.judgement)
    where = _update_pull(ctx, branch, change.title, report)
    _reply(ctx, pull_number, change.reply(pushed.commit, report.final_summary,
                                          pushed.replayed_on) if change.reply else
           review_pushed(ctx.trigger.actor, pushed.commit, report.final_summary,
                         pushed.replayed_on))
    published(ctx, where, not_installed_note(host, result.snapshot.paths))
    return "pushed"


def _update_pull(ctx: RunContext, branch: str, title: str, report: RunReport) -> str:
    """The PR's body describes the pushed change; where the change is (the PR, or the
    branch when its PR was closed meanwhile)."""
    pull = ctx.github.find_open_pull(ctx.repo, branch)
    if pull is None:
        return branch
    ctx.github.update_pull(ctx.repo, pull.number, title=title, body=pr_body(report))
    if report.read_first:  # the new commit adds what no test run tells from a fix
        label_careful(ctx.github, ctx.repo, pull.number)
    return pull.url


def _reply(ctx: RunContext, pull_number: int, reply: str) -> None:
    """Answered where it was asked: the review comment's thread, or the PR."""
    if ctx.trigger.review_comment_id is not None:
        ctx.github.reply_to_review_comment(ctx.repo, pull_number,
                                           ctx.trigger.review_comment_id, reply)
    else:
        ctx.github.comment(ctx.repo, pull_number, reply)


@dataclass(frozen=True)
class Pushed:
    commit: str  # what the branch now points at
    replayed_on: str | None = None  # the moved head the change was replayed on, if any
    judgement: Judgement | None = None  # the verdict on the replayed tree, if any


class _Unmoved(Transient):
    """A push on top that failed while the branch stayed where the run started (a
    dropped connection, a 5xx): tried again (PUSH_RETRY); the last one is raised as it
    was."""

    def __init__(self, failure: Exception) -> None:
        super().__init__(str(failure))
        self.failure = failure


@dataclass
class _OnTop:
    """A push on top in progress: the change committed in the host's git directory (what
    a replay merges), the commit GitHub made of it (what is pushed), and the head both
    sit on."""

    local: str
    remote: str
    parent: str
    replayed_on: str | None = None
    judged: Judgement | None = None
    replays: int = 0

    def pushed(self) -> Pushed:
        return Pushed(self.remote, self.replayed_on, self.judged)


def push_on_top(*, github: GitHubApi, cache: RepoCache, repo: RepoRef, host: HostRepo,
                snapshot: Snapshot, branch: str, message: str, judge_replay: JudgeReplay,
                current: Callable[[], bool] = always_current, replay: bool = True
                ) -> Pushed:
    """Commit the snapshot on GitHub (signed by it: api_commit.py) on the PR head the run
    started from, and move the branch to it as a fast-forward only.

    If someone pushed to the branch meanwhile (GitHub: not a fast forward), the change is
    replayed on the new head by a three-way merge in the host-owned git directory (never
    in the sandbox; the new head fetched by git smart HTTP) and the merged tree goes
    through the verdict again (`judge_replay`), then is committed on GitHub on that head:
    nothing is pushed that was not tested as pushed. A conflict raises BranchMoved, a
    refused replay ReplayFailed. A failed ref write (a dropped connection, a 5xx) is
    tried again while the branch did not move (PUSH_RETRY); one that landed is not.
    Before every ref write `current()` is asked (False: Stopped) and the head is read: a
    reset to an older commit (a person dropped the bot's last one) is replayed on as any
    move. `replay` False (a CI round, which no person asked for): a branch moved to any
    commit but the parent raises BranchTaken."""
    refuse_unsafe(snapshot)  # every caller checks first: the last line before an upload
    identity = bot_identity(github.bot_login())
    state = _OnTop(host.commit(snapshot.tree, branch, message, identity=identity),
                   create_commit(github, repo, host, tree=snapshot.tree, parent=host.base,
                                 message=message), host.base)
    url, token = github.clone_url(repo), lambda: github.installation_token(repo)

    def try_once(_: int) -> Pushed:
        read = True  # False for one write: git said the API's answer was behind
        while True:
            check_current(current, branch)
            seen, read = (github.branch_head(repo, branch) if read else state.parent), True
            if seen is None and not replay:
                raise BranchTaken(branch, None)
            writing = seen in (state.parent, None)
            failure = (_write(github, repo, branch, state.remote, create=replay)
                       if writing else None)
            if writing and failure is None:
                return state.pushed()
            head = cache.fetch_branch(host.git_dir, url, branch, token())
            if head == state.remote:  # it went through; only the answer was lost
                return state.pushed()
            if head == state.parent:  # the branch did not move
                if failure is None:
                    read = False
                    continue
                raise _Unmoved(failure)  # the write itself failed
            if not replay:
                raise BranchTaken(branch, head)
            log.info("the branch %s moved to %s (%s); replaying on it", branch, head[:12],
                     failure or "read before the push")
            _replay_on(state, head, github, repo, host, branch, message, identity,
                       judge_replay)

    policy = Backoff(tries=PUSH_RETRY.tries, first_wait=PUSH_RETRY.first_wait,
                     retry_on=(_Unmoved,))
    try:
        pushed = with_backoff(try_once, policy, what=f"push of {branch} on top")
    except _Unmoved as last:
        raise last.failure from None
    know_pushed(cache, host, github, repo, branch, pushed.commit)
    return pushed


def _write(github: GitHubApi, repo: RepoRef, branch: str, commit: str, *,
           create: bool) -> Exception | None:
    """One ref write moving `branch` to `commit` as a fast-forward: None once the branch is
    it, else why not (it moved, or GitHub failed). A branch deleted meanwhile is made
    again, as a push did, when `create`; else (a CI repair round: a person deleted it)
    BranchTaken."""
    try:
        github.move_branch(repo, branch, commit, force=False)
    except NotFound:
        if not create:
            raise BranchTaken(branch, None) from None
        github.create_branch(repo, branch, commit)
    except (NotFastForward, ServerError) as exc:
        return exc
    return None


def _replay_on(state: _OnTop, head: str, github: GitHubApi, repo: RepoRef, host: HostRepo,
               branch: str, message: str, identity: Identity,
               judge_replay: JudgeReplay) -> None:
    """The change replayed on the moved `head` and judged (`_replay`), then committed on
    GitHub on that head: the next ref write pushes it."""
    state.replays += 1
    if state.replays > MAX_REPLAYS:
        raise BranchMoved(f"`{branch}` kept moving during the run (now at "
                          f"{head[:12]}); nothing was pushed")
    state.local, state.judged = _replay(host, head, state.local, branch, message, identity,
                                        judge_replay)
    state.remote = create_commit(github, repo, host, tree=host.tree_of(state.local),
                                 parent=head, message=message)
    state.parent = state.replayed_on = head


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


def _replayed_report(report: RunReport, judgement: Judgement) -> RunReport:
    return dataclasses.replace(
        report, final_summary=judgement.final.summary(), final_output=judgement.final.output,
        verdict_notes=[*judgement.verdict.notes, "the tests were re-run on the change "
                       "replayed on the branch's new head"],
        new_tests=judgement.verdict.new_tests_summary(),
        evidence=list(judgement.verdict.evidence))
