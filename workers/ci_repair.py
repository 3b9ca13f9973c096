"""The PR repairs its own CI (issue 23 §2): in a `ci: run` repository a failed check on
the head the bot pushed to `frognano/issue-N` is the next verdict.

accept_ci (control queue): one round per head; the repository says `ci: run`; the PR's
head is still that commit and the bot's (a person's push stops the loop); no run of the
issue is queued or running; fewer than `ci_fix_rounds` rounds since a person last
started a run (label, retry, review), else the bot says so once and labels the PR
`needs-human`. Then a run of kind "ci" is queued like a review's: from the PR head,
with the failing checks' names and log tails as guidance (start_round), the same
verdict, one commit on top (workers/publish/review.py), a reply that says what changed.
A person's review of the current head or of a head a round ran on stops the loop too.
A head whose repository tests all pass in the sandbox cannot be reproduced: the run
stops after the baseline, says so and labels the PR.

No person asked for a round, so it builds only on the head it was accepted for: a
branch that moved since (a person's push or rewrite, before the round's workspace was
made, during the run, or during the push itself: workers/publish/review.py's
BranchTaken) stops the round with nothing pushed, says so on the PR and takes that
head's claim, so no round runs on it (outcome `branch_moved`).

The rounds live in Redis beside the issue's generations (`frognano:ci-rounds:<issue>`, a
list of JSON entries, 30 days): the count, and the PR body's "CI repairs" section.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bot.ci_checks import (
    LOG_DOWNLOAD_BYTES,
    FailedCheck,
    failed_checks,
    failed_runs,
    is_bots_commit,
)
from bot.github_api import CheckRunInfo, GitHubError, RepoRef
from bot.messages import (
    NEEDS_HUMAN_LABEL,
    CiRoundLine,
    RunReport,
    ci_branch_moved,
    ci_gave_up,
    ci_not_repaired,
    ci_not_reproduced,
    ci_pushed,
    decision_reason,
)
from bot.triggers import Trigger
from solver.agent.prompts import ci_feedback
from solver.agent.result import SolveResult
from solver.agent.run_events import BaselineDone, Event
from solver.hostgit import GitError, run_git
from solver.policy import branch_for
from solver.repo_config import CONFIG_PATH, RepoConfig, RepoConfigError, parse_repo_config
from workers.context import RunContext
from workers.coordination import DELIVERY_TTL, IssueCoordinator
from workers.runtime import Runtime
from workers.status import RunStatus

log = logging.getLogger(__name__)

ROUNDS_TTL = 30 * 24 * 3600  # a PR's CI repairs are listed for a month after the last


class CiRounds:
    """The issue's CI repair rounds, oldest first; a reset marker (a person started a
    run) restarts the count but keeps the list."""

    def __init__(self, redis: Any, issue_key: str) -> None:
        self.redis, self.key = redis, f"frognano:ci-rounds:{issue_key}"

    def _entries(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.redis.lrange(self.key, 0, -1)]

    def count(self) -> int:
        """Rounds since the last reset."""
        entries = self._entries()
        resets = [i for i, entry in enumerate(entries) if entry.get("reset")]
        return len(entries) - (resets[-1] + 1 if resets else 0)

    def start(self, generation: int, head: str, checks: list[str]) -> int:
        """Record the round of `generation` (once: a redelivered run keeps its number)."""
        entries = self._entries()
        for index, entry in enumerate(entries):
            if entry.get("generation") == generation:
                return self._number(entries, index)
        self.redis.rpush(self.key, json.dumps({"generation": generation, "head": head,
                                               "checks": checks, "outcome": "running"}))
        self.redis.expire(self.key, ROUNDS_TTL)
        return self.count()

    @staticmethod
    def _number(entries: list[dict[str, Any]], index: int) -> int:
        since = [i for i, entry in enumerate(entries[:index]) if entry.get("reset")]
        return index - (since[-1] + 1 if since else 0) + 1

    def finish(self, generation: int, outcome: str) -> None:
        for index, entry in enumerate(self._entries()):
            if entry.get("generation") == generation:
                self.redis.lset(self.key, index, json.dumps({**entry, "outcome": outcome}))

    def reset(self) -> None:
        if self.count():
            self.redis.rpush(self.key, json.dumps({"reset": True}))
            self.redis.expire(self.key, ROUNDS_TTL)

    def heads(self) -> list[str]:
        """The heads of the rounds since the last reset."""
        entries = self._entries()
        return [str(e["head"]) for e in entries[len(entries) - self.count():]]

    def lines(self) -> list[CiRoundLine]:
        entries, lines = self._entries(), []
        for index, entry in enumerate(entries):
            if not entry.get("reset"):
                lines.append(CiRoundLine(self._number(entries, index), str(entry["head"]),
                                         tuple(entry.get("checks", ())),
                                         str(entry.get("outcome", "running"))))
        return lines

    def current(self, generation: int) -> CiRoundLine | None:
        entries = self._entries()
        for index, entry in enumerate(entries):
            if entry.get("generation") == generation:
                return CiRoundLine(self._number(entries, index), str(entry["head"]),
                                   tuple(entry.get("checks", ())))
        return None


# --- accepting a red check -----------------------------------------------------------


def accept_ci(rt: Runtime, trigger: Trigger) -> str:
    """duplicate (this head had its round), ignored (why is logged), gave_up (the round
    limit: said once on the PR, labelled needs-human) or queued."""
    assert trigger.head_sha is not None
    repo, coordinator = trigger.repo_ref, IssueCoordinator(rt.redis, trigger.issue_key)
    claim = _head_claim(trigger.issue_key, trigger.head_sha)
    if not rt.redis.set(claim, trigger.delivery_id, nx=True, ex=DELIVERY_TTL):
        return "duplicate"  # check_suite and check_run, or several suites, of one head
    why = _not_for_us(rt, trigger, repo)
    if isinstance(why, str):
        log.info("%s: CI failure on %s ignored: %s", trigger.issue_key,
                 trigger.head_sha[:12], why)
        return "ignored"
    config, pull_number = why
    if coordinator.is_active():  # that run owns the next push; this head may come again
        rt.redis.delete(claim)
        log.info("%s: CI failure on %s ignored: a run is queued or running",
                 trigger.issue_key, trigger.head_sha[:12])
        return "ignored"
    rounds = CiRounds(rt.redis, trigger.issue_key)
    if rounds.count() >= config.ci_fix_rounds:
        names = [c.name for c in _failed(rt, repo, trigger.head_sha)]
        rt.github.comment(repo, pull_number, ci_gave_up(rounds.count(), trigger.head_sha,
                                                        names))
        label_needs_human(rt, repo, pull_number)
        return "gave_up"
    generation = coordinator.assign_generation(trigger.delivery_id)
    RunStatus.of(rt.github, trigger, generation).queued(rt.queue_length() + 1)
    rt.enqueue_run({**trigger.to_kwargs(), "pull_number": pull_number,
                    "generation": generation})
    return "queued"


def _head_claim(issue_key: str, head: str) -> str:
    """The Redis key a head's first red check takes: one round per head."""
    return f"frognano:ci-head:{issue_key}:{head}"


def _not_for_us(rt: Runtime, trigger: Trigger, repo: RepoRef
                ) -> str | tuple[RepoConfig, int]:
    """Why this red check starts nothing, or the repository's config and the PR."""
    try:
        config = parse_repo_config(rt.github.read_file(
            repo, CONFIG_PATH, rt.github.default_branch(repo)))
    except RepoConfigError:
        return f"invalid {CONFIG_PATH}"
    if config.ci != "run":
        return "the repository has `ci: skip`"
    if config.ci_fix_rounds == 0:
        return "the repository has `ci_fix_rounds: 0`"
    pull = rt.github.find_open_pull(repo, branch_for(trigger.issue_number))
    if pull is None:
        return "the bot's pull request is not open"
    if pull.head_sha != trigger.head_sha:
        return f"the branch moved on to {pull.head_sha[:12]}"
    bot = rt.github.bot_login()
    if not is_bots_commit(rt.github.commit(repo, pull.head_sha), bot):
        return "the head commit is not the bot's (a person pushed to the branch)"
    # The heads the loop ran on since a person last started a run, and this one.
    heads = {pull.head_sha, *CiRounds(rt.redis, trigger.issue_key).heads()}
    if any(r.author != bot and r.commit_id in heads
           for r in rt.github.reviews(repo, pull.number)):
        return "a person reviewed the pull request during the loop"
    return config, pull.number


def label_needs_human(rt: Runtime, repo: RepoRef, pull_number: int) -> None:
    rt.github.ensure_label(repo, NEEDS_HUMAN_LABEL, "b60205",
                           "FrogNano stopped repairing this PR's CI: a person must look")
    rt.github.add_labels(repo, pull_number, [NEEDS_HUMAN_LABEL])


def _failed(rt: Runtime, repo: RepoRef, head: str) -> list[CheckRunInfo]:
    return failed_runs(rt.github.check_runs(repo, head), rt.github.bot_login())


# --- the round's run ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CiRoundStarted(Event):
    """The round a CI repair run is, and the checks that triggered it with what of their
    logs the model got: the run page shows it."""

    kind: ClassVar[str] = "ci_round"
    number: int
    of: int
    head: str
    checks: list[FailedCheck]

    def fields(self) -> dict[str, Any]:
        return {"number": self.number, "of": self.of, "head": self.head,
                "checks": [dataclasses.asdict(c) for c in self.checks]}


def start_round(ctx: RunContext, config: RepoConfig) -> str:
    """The model's guidance for a CI repair run: the failing checks and their log tails;
    the round is recorded (Redis, the run record)."""
    trigger, github = ctx.trigger, ctx.github
    assert trigger.head_sha is not None

    def read_log(run: CheckRunInfo) -> str | None:
        try:
            return github.job_log(ctx.repo, run.id, LOG_DOWNLOAD_BYTES)
        except GitHubError as exc:  # the run's own output stands in for it
            log.warning("could not read the log of check %s: %s", run.id, exc)
            return None

    checks = failed_checks(_failed(ctx.runtime, ctx.repo, trigger.head_sha), read_log)
    number = CiRounds(ctx.runtime.redis, trigger.issue_key).start(
        ctx.generation, trigger.head_sha, [c.name for c in checks])
    ctx.recorder.emit(CiRoundStarted(number=number, of=config.ci_fix_rounds,
                                     head=trigger.head_sha, checks=checks))
    return ci_feedback([(c.name, c.log_tail) for c in checks])


class BaselineWatch:
    """An output of the run: whether the PR head's own tests all passed at baseline (the
    CI failure is then one the bot cannot reproduce, and the run stops there)."""

    def __init__(self) -> None:
        self.passed = False

    def emit(self, event: Event) -> None:
        if isinstance(event, BaselineDone) and event.tests.passed:
            self.passed = True


def after_run(ctx: RunContext, config: RepoConfig, result: SolveResult, report: RunReport,
              decision: Any) -> str | None:
    """What a CI repair run ends with unless it publishes: ci_not_reproduced (its tests
    pass on the head), or the decision's outcome (nothing to push); None: publish."""
    pull = ctx.trigger.pull_number or ctx.trigger.issue_number
    current = CiRounds(ctx.runtime.redis, ctx.trigger.issue_key).current(ctx.generation)
    checks = list(current.checks) if current else []
    if result.baseline is not None and result.baseline.passed:
        ctx.github.comment(ctx.repo, pull, ci_not_reproduced(
            ctx.trigger.head_sha or "", checks, report.test_command))
        label_needs_human(ctx.runtime, ctx.repo, pull)
        ctx.status.failed("the CI failure does not reproduce in the sandbox")
        return "ci_not_reproduced"
    if decision.action == "publish":
        return None
    number = current.number if current else 0
    ctx.github.comment(ctx.repo, pull, ci_not_repaired(number, config.ci_fix_rounds, checks,
                                                       decision_reason(decision)))
    label_needs_human(ctx.runtime, ctx.repo, pull)
    ctx.status.failed(decision_reason(decision))
    return str(decision.outcome)


def with_rounds(ctx: RunContext, report: RunReport, publishing: bool, *,
                this_round: bool) -> RunReport:
    """The report with the PR's CI repair rounds (this one, when the run is a round, as
    pushed when publishing)."""
    rounds = CiRounds(ctx.runtime.redis, ctx.trigger.issue_key)
    lines = rounds.lines()
    current = rounds.current(ctx.generation) if this_round else None
    if current is not None and publishing:
        lines = [dataclasses.replace(line, outcome="pushed")
                 if (line.number, line.head) == (current.number, current.head) else line
                 for line in lines]
    return dataclasses.replace(report, ci_rounds=lines)


def reply_for(ctx: RunContext, config: RepoConfig) -> Callable[[str, str, str | None], str]:
    """The reply to a pushed CI repair: (commit, final summary, replayed on) → text."""
    current = CiRounds(ctx.runtime.redis, ctx.trigger.issue_key).current(ctx.generation)

    def reply(commit: str, final_summary: str, replayed_on: str | None) -> str:
        return ci_pushed(commit, current.number if current else 0, config.ci_fix_rounds,
                         list(current.checks) if current else [], final_summary, replayed_on)

    return reply


def mirror_head(mirror: Path, trigger: Trigger) -> str | None:
    """The PR branch's head in the repository's mirror, just refreshed (None: no branch):
    what the round's workspace is made from."""
    try:
        return run_git("rev-parse", "--verify", "--quiet",
                       f"refs/heads/{branch_for(trigger.issue_number)}^{{commit}}",
                       git_dir=mirror).decode().strip() or None
    except GitError:
        return None


def stop_if_moved(ctx: RunContext, head: str | None) -> str | None:
    """`branch_moved` (said on the PR) when the branch's `head` is not the one the round
    was accepted for; None: it is, the round goes on."""
    return None if head == ctx.trigger.head_sha else branch_moved(ctx, head)


def branch_moved(ctx: RunContext, head: str | None) -> str:
    """The round's branch moved to `head` (None: deleted), a commit the round did not
    start from: nothing is pushed, the PR says so (inert: a branch and two shas), and that
    head's claim is taken, so a red check on it starts no round."""
    trigger, branch = ctx.trigger, branch_for(ctx.trigger.issue_number)
    if head is not None:
        ctx.runtime.redis.set(_head_claim(trigger.issue_key, head), "branch_moved",
                              ex=DELIVERY_TTL)
    log.info("%s: CI repair round stopped: %s moved to %s", trigger.issue_key, branch,
             head[:12] if head else "nothing")
    ctx.github.comment(ctx.repo, trigger.pull_number or trigger.issue_number,
                       ci_branch_moved(branch, trigger.head_sha or "", head))
    ctx.status.failed(f"`{branch}` moved during the CI repair round; nothing was pushed")
    return "branch_moved"
