"""Publishing a passing run on GitHub while others act on the same branch and issue.

A review run (changes requested, or a `/frognano` comment on the bot's PR) starts from
the PR branch's head; its change goes on top of that head without force
(`workers/publish.push_on_top`), then the reply and the PR body's test report
(`publish_review`). A first run force-pushes its branch and opens the draft PR
(`publish_pull`, over `workers/publish.push_and_open_pull`).

Two races are settled here:

- **The branch moved** (a human pushed during the run): the change is replayed on the
  new head and the merged tree goes through the run's own verdict again (`judge_replay`),
  so what is pushed is what was tested. Which tests count: the new head's, as it is.
  After a replay the base *is* the new head, human commits included, so a human's edits
  to tests or test configuration are trusted and run as they are there; the model's
  edits to them are put back to the new head's version (they are run apart, as the
  model's own tests, exactly as in the run). The baseline for the per-test comparison is
  the new head's own test run.
- **A cancel during publishing** (both kinds of run): staleness is checked right before
  every push attempt (`current`); a cancel before one pushes nothing and ends as
  `cancelled`. Once GitHub has accepted a push the cancel is too late for it: the PR
  steps still finish (never a pushed branch without its PR, reply and report) and the
  status comment says the cancel arrived after the push, and who cancelled.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from bot.github_api import PullInfo, RepoRef
from bot.markdown import escape_text
from bot.messages import (
    RunReport,
    pr_body,
    review_not_pushed,
    review_pushed,
    review_replay_failed,
    status_cancelled,
    status_done,
    status_failed,
    status_pushed_after_cancel,
)
from bot.triggers import Trigger
from sandbox import SandboxConfig, open_sandbox
from solver.agent.result import SolveResult
from solver.agent.run_events import Event, EventOutput
from solver.hostgit import HostRepo, Snapshot
from solver.policy import branch_for
from solver.run_path import not_installed_note
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.verdict_run import Judgement, VerdictRunner
from workers.coordination import IssueCoordinator
from workers.publish import (
    BranchMoved,
    JudgeReplay,
    ReplayFailed,
    Stopped,
    label_careful,
    push_and_open_pull,
    push_on_top,
)
from workers.run_recording import RunRecorder
from workers.runtime import Runtime
from workers.status import StatusComment

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ReplayJudged(Event):
    """The tests re-run on a review's change replayed on the PR branch's moved head, before
    its push. Recorded after the run's `result`: the run's transcript is appended to and
    the run record gets it as an event, so the dashboard shows what the push was judged
    on."""

    kind: ClassVar[str] = "replay"
    head: str  # the moved head the change was replayed on
    baseline: TestVerdict  # the new head's own test run
    judgement: Judgement
    seconds: float  # the whole re-judging: baseline, the tests, the model's tests
    test_runs: int

    def fields(self) -> dict[str, Any]:
        judged = self.judgement
        return {"head": self.head, **judged.final.to_dict(),
                "verdict": judged.verdict.to_dict(), "baseline": self.baseline.to_dict(),
                "model_tests": judged.with_model_tests.to_dict()
                if judged.with_model_tests else None,
                "replay_seconds": round(self.seconds, 3), "test_runs": self.test_runs}


def publish_review(rt: Runtime, trigger: Trigger, generation: int,
                   coordinator: IssueCoordinator, host: HostRepo, result: SolveResult,
                   report: RunReport, status: StatusComment, title: str, message: str,
                   test_timeout: float, events: EventOutput) -> str:
    """A review's passing change: a new commit on the PR branch, a reply, the PR body's
    test report updated. Outcomes: pushed; conflict or replay_failed (the branch moved
    and the change does not apply, or fails the tests on it: a comment, the branch as it
    was); cancelled or superseded (a newer generation before the push: nothing pushed).
    `events` (the run's transcript and record) hears each replay's re-run."""
    repo = RepoRef(trigger.owner, trigger.repo, trigger.installation_id)
    branch = branch_for(trigger.issue_number)
    pull_number = trigger.pull_number or trigger.issue_number
    assert result.snapshot is not None  # decide() publishes only a readable change
    try:
        pushed = push_on_top(
            github=rt.github, cache=rt.repo_cache, repo=repo, host=host,
            snapshot=result.snapshot, branch=branch, message=message,
            judge_replay=judge_replay(rt.sandbox_backend, host, result.test_command,
                                      test_timeout, events),
            current=lambda: not coordinator.is_stale(generation))
    except Stopped:
        return _stopped(coordinator, generation, status)
    except BranchMoved as exc:
        rt.github.comment(repo, pull_number, review_not_pushed(str(exc)))
        status.set(status_failed(str(exc), generation))
        return "conflict"
    except ReplayFailed as exc:
        final = exc.judgement.final
        rt.github.comment(repo, pull_number, review_replay_failed(
            branch, exc.head, exc.judgement.verdict.reasons, final.output))
        status.set(status_failed(f"{exc}; nothing was pushed", generation))
        return "replay_failed"
    if pushed.judgement is not None:  # the report describes the tree that was pushed
        report = _replayed_report(report, pushed.judgement)
    pull = rt.github.find_open_pull(repo, branch)
    if pull is not None:
        rt.github.update_pull(repo, pull.number, title=title, body=pr_body(report))
        if report.read_first:  # the new commit adds what no test run tells from a fix
            label_careful(rt.github, repo, pull.number)
    reply = review_pushed(trigger.actor, pushed.commit, report.final_summary,
                          pushed.replayed_on)
    if trigger.review_comment_id is not None:  # answered where it was asked
        rt.github.reply_to_review_comment(repo, pull_number, trigger.review_comment_id, reply)
    else:
        rt.github.comment(repo, pull_number, reply)
    _pushed(coordinator, generation, status, pull.url if pull else branch,
            not_installed_note(host, result.snapshot.paths))
    return "pushed"


def publish_pull(rt: Runtime, trigger: Trigger, generation: int,
                 coordinator: IssueCoordinator, host: HostRepo, snapshot: Snapshot,
                 status: StatusComment, recorder: RunRecorder | None, *, title: str,
                 body: str, base: str, message: str, careful: bool = False) -> str:
    """A first run's passing change: force-push `frognano/issue-N`, open or update the
    draft PR, request review. Outcomes: pr_opened; cancelled or superseded (a newer
    generation before the push: nothing pushed, no PR step)."""
    repo = RepoRef(trigger.owner, trigger.repo, trigger.installation_id)
    try:
        pull: PullInfo = push_and_open_pull(
            github=rt.github, cache=rt.repo_cache, repo=repo, host=host, snapshot=snapshot,
            issue_number=trigger.issue_number, title=title, body=body, base=base,
            reviewer=trigger.actor, message=message,
            current=lambda: not coordinator.is_stale(generation), careful=careful)
    except Stopped:
        return _stopped(coordinator, generation, status)
    if recorder is not None:
        recorder.set_pr_url(pull.url)
    _pushed(coordinator, generation, status, pull.url, not_installed_note(host, snapshot.paths))
    return "pr_opened"


def _stopped(coordinator: IssueCoordinator, generation: int, status: StatusComment) -> str:
    """Nothing was pushed: a cancel says so (a progress edit may have landed after the
    cancel's own); a superseding run owns the status comment."""
    outcome, reason = coordinator.stop_reason()
    if reason is not None:
        status.set(status_cancelled(reason, generation))
    return outcome


def _pushed(coordinator: IssueCoordinator, generation: int, status: StatusComment,
            where: str, setup_note: str = "") -> None:
    """The status once the PR steps are done; a cancel that arrived after GitHub accepted
    the push is named as too late. A newer trigger's "queued" stays: it runs next, on
    this push. `setup_note`: the branch edits what setup reads, which was not installed
    (run_path.not_installed_note); its paths are the model's, so escaped."""
    if not coordinator.is_stale(generation):
        extra = f"\n\n⚠️ {escape_text(setup_note)}" if setup_note else ""
        status.set(status_done(where, generation) + extra)
        return
    late, reason = coordinator.stop_reason()
    if late == "cancelled" and reason is not None:
        status.set(status_pushed_after_cancel(where, generation, reason))


def judge_replay(backend: str, host: HostRepo, test_command: str, timeout: float,
                 events: EventOutput) -> JudgeReplay:
    """The run's verdict for a tree made after its sandbox closed: fresh sandboxes built
    as the run's (`solver/run_path.execute`'s config) with the private area as setup left
    it (the harness's copy under `<run>/harness`), a baseline of the new head, then
    `VerdictRunner.judge_snapshot`: the same restore of test files, the same rules. Each
    re-run goes to `events` as a `ReplayJudged`, and to the log."""
    run_dir = host.work_tree.parent

    def judge(at_head: HostRepo, tree: str) -> Judgement:
        started = time.monotonic()
        config = SandboxConfig(workspace=host.work_tree, private_dir=run_dir / "private")
        runner = VerdictRunner(None, at_head, test_command, run_dir / "harness",
                               config=config,
                               open_sandbox=lambda c: open_sandbox(backend, c))
        baseline = runner.baseline(timeout)
        snapshot = Snapshot(base=at_head.base, tree=tree, diff="",
                            paths=at_head.changed_paths(tree), links=at_head.links(tree))
        judged = runner.judge_snapshot(baseline, snapshot, timeout)
        events.emit(ReplayJudged(head=at_head.base, baseline=baseline, judgement=judged,
                                 seconds=time.monotonic() - started, test_runs=runner.runs))
        log.info("the change replayed on %s: tests %s, %s (%.1f s for %d test runs)",
                 at_head.base[:12], judged.final.summary(),
                 "accepted" if judged.verdict.accepted else "refused",
                 time.monotonic() - started, runner.runs)
        return judged

    return judge


def _replayed_report(report: RunReport, judgement: Judgement) -> RunReport:
    return dataclasses.replace(
        report, final_summary=judgement.final.summary(), final_output=judgement.final.output,
        verdict_notes=[*judgement.verdict.notes, "the tests were re-run on the change "
                       "replayed on the branch's new head"],
        new_tests=judgement.verdict.new_tests_summary())
