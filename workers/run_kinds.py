"""The bot's kinds of run, one class each: what differs between a first run on an issue,
a review on the bot's PR and a CI repair round lives here, and nowhere else reads
`trigger.kind` to tell them apart (workers/run_issue.py drives them all alike).

- `FirstRun` (a label, a retry): from the default branch, nothing distrusted, the
  trigger's text as guidance, the config's `candidates`, a draft PR (`publish_pull`);
- `ReviewRun` (a review, a `/frognano` comment on the PR): from the PR branch's head,
  the bot's own commits distrusted, the review and its line comments as guidance, one
  candidate, a commit on top (`publish_review`: replayed and judged again by the solver
  on a moved head) and a reply;
- `CiRepairRun` (a red check on the bot's head, `ci: run`): from the head the round was
  accepted for, as a review; the failing checks and their logs as guidance; it also
  stops when that head's tests pass at baseline or the branch moves (nothing pushed on a
  commit the round did not start from); the reply names the checks.

`frognano solve` is the fourth kind (frognano/solve_command.py): a local checkout, a
local branch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bot.messages import (
    RunReport,
    decision_reason,
    failure_comment,
    pr_body,
    pull_title,
    review_not_pushed,
)
from bot.triggers import Trigger
from solver.agent.prompts import review_comments_text
from solver.agent.result import SolveResult
from solver.agent.run_events import Outputs
from solver.agent.transcript import Transcript
from solver.policy import bot_identity, branch_for
from solver.repo_config import RepoConfig
from solver.run import Decision, OwnCommits, RunOutcome, Workspace
from workers import ci_repair
from workers.context import RunContext
from workers.publish.pull import DraftPull, publish_pull
from workers.publish.review import ReviewChange, publish_review
from workers.runtime import Runtime

# The run's transcript for candidate k (workers/run_issue.transcript_path).
TranscriptFor = Callable[[int], Path]
Reply = Callable[[str, str, str | None], str]  # (commit, tests after it, replayed on) → text
Taken = Callable[[str | None], str]  # the branch's new head (None: deleted) → the outcome


class FirstRun:
    """A person labelled the issue (or asked for a retry): a draft PR from the default
    branch, best of the config's `candidates`."""

    candidates: int | None = None  # None: the config's `candidates`

    def before_run(self, ctx: RunContext, mirror: Path) -> str | None:
        """An outcome that ends the run before it starts; None: it goes on. A person is
        in the loop again: the PR's CI repair count restarts."""
        ci_repair.CiRounds(ctx.runtime.redis, ctx.trigger.issue_key).reset()
        return None

    def branch(self, trigger: Trigger, default_branch: str) -> str:
        """Where the run starts and its change goes (the evidence ran on it)."""
        return default_branch

    def workspace(self, rt: Runtime, trigger: Trigger, default_branch: str, mirror: Path,
                  run_dir: Path) -> Workspace:
        return Workspace(source=mirror, run_dir=run_dir,
                         branch=self.branch(trigger, default_branch))

    def guidance(self, ctx: RunContext, config: RepoConfig) -> str:
        """The trigger's text; for a submitted review, its line comments (file, line, diff
        hunk) too, which the webhook does not carry. The bot's own comments are left
        out."""
        trigger = ctx.trigger
        if trigger.review_id is None or trigger.pull_number is None:
            return trigger.guidance
        bot = ctx.github.bot_login()
        comments = [c for c in ctx.github.review_comments(ctx.repo, trigger.pull_number,
                                                          trigger.review_id)
                    if c.author != bot]
        return "\n\n".join(p for p in (trigger.guidance, review_comments_text(comments)) if p)

    def stops(self) -> ci_repair.BaselineWatch | None:
        """An output of the run that ends it early when it says so (`passed`); None."""
        return None

    def after_run(self, ctx: RunContext, ran: RunOutcome, config: RepoConfig,
                  report: RunReport) -> str | None:
        """An outcome that ends the run once it finished, before publishing; None."""
        return None

    def this_round(self) -> bool:
        """Whether the run is a CI repair round, listed in the PR body as this one."""
        return False

    def not_published(self, ctx: RunContext, result: SolveResult, report: RunReport,
                      decision: Decision) -> str:
        """The tests still fail: said on the issue; the status comment says why either
        way."""
        if not result.tests_passed:
            ctx.github.comment(ctx.repo, ctx.trigger.issue_number, failure_comment(report))
        ctx.status.failed(decision_reason(decision))
        return decision.outcome

    def apply(self, ctx: RunContext, ran: RunOutcome, report: RunReport, message: str,
              transcript_for: TranscriptFor) -> str:
        """A draft PR into the default branch. A cancel is honoured up to the push; after
        an accepted push the PR steps finish."""
        assert ran.result.snapshot is not None  # decide() publishes only a readable change
        return publish_pull(ctx, ran.host, ran.result.snapshot, DraftPull(
            title=pull_title(report.issue_title), body=pr_body(report),
            base=report.base_branch, message=message, careful=bool(report.read_first),
            unverified=not ran.decision.verified))

    def finish(self, rt: Runtime, trigger: Trigger, generation: int, outcome: str) -> None:
        """After the run, whatever its outcome (a CI round records it)."""


class ReviewRun(FirstRun):
    """A review of the bot's PR (changes requested, or a `/frognano` comment on it): one
    candidate, from the PR branch's head (a person's commits on it included), judged by
    the repository's tests, not the model's from an earlier run, its setup running none
    of the model's files; the change goes on top of the branch."""

    candidates: int | None = 1

    def branch(self, trigger: Trigger, default_branch: str) -> str:
        return branch_for(trigger.issue_number)

    def workspace(self, rt: Runtime, trigger: Trigger, default_branch: str, mirror: Path,
                  run_dir: Path) -> Workspace:
        own = OwnCommits(f"refs/heads/{default_branch}", bot_identity(rt.github.bot_login())[1])
        return Workspace(source=mirror, run_dir=run_dir,
                         branch=self.branch(trigger, default_branch), own_commits=own)

    def not_published(self, ctx: RunContext, result: SolveResult, report: RunReport,
                      decision: Decision) -> str:
        """Said on the PR: the failure comment when the tests still fail, else why the
        change was not pushed."""
        if ctx.trigger.pull_number is None:
            return super().not_published(ctx, result, report, decision)
        ctx.github.comment(ctx.repo, ctx.trigger.pull_number, failure_comment(report)
                           if not result.tests_passed else review_not_pushed(
                               decision_reason(decision)))
        ctx.status.failed(decision_reason(decision))
        return decision.outcome

    def reply(self, ctx: RunContext, config: RepoConfig) -> Reply | None:
        """The reply once pushed; None: a review's (workers/publish/review.py)."""
        return None

    def taken(self, ctx: RunContext) -> Taken | None:
        """What a branch moved to another commit during the run means; None: a person
        asked for the change, so it is replayed on the new head."""
        return None

    def apply(self, ctx: RunContext, ran: RunOutcome, report: RunReport, message: str,
              transcript_for: TranscriptFor) -> str:
        """A commit on top of the PR branch; one candidate, so its transcript is the
        first's, appended to by a replay on a moved head."""
        with Transcript(transcript_for(0)) as transcript:
            return publish_review(ctx, ran.host, ran.result, report, ReviewChange(
                title=pull_title(report.issue_title), message=message,
                replay=ran.replay(), events=Outputs(transcript, ctx.recorder),
                reply=self.reply(ctx, ran.config), taken=self.taken(ctx)))


class CiRepairRun(ReviewRun):
    """A red check on the head the bot pushed (`ci: run`): no person asked, so it builds
    only on the head it was accepted for, stops when that head's tests pass at baseline
    (the failure does not reproduce), and replies naming the checks it answers."""

    def before_run(self, ctx: RunContext, mirror: Path) -> str | None:
        """The branch was pushed to between the accept step and the workspace."""
        return ci_repair.stop_if_moved(ctx, ci_repair.mirror_head(mirror, ctx.trigger))

    def guidance(self, ctx: RunContext, config: RepoConfig) -> str:
        return ci_repair.start_round(ctx, config)

    def stops(self) -> ci_repair.BaselineWatch | None:
        return ci_repair.BaselineWatch()

    def after_run(self, ctx: RunContext, ran: RunOutcome, config: RepoConfig,
                  report: RunReport) -> str | None:
        """The mirror moved between the check before the run and the workspace; else not
        reproduced, or nothing to push: said on the PR."""
        moved = ci_repair.stop_if_moved(ctx, ran.host.base)
        if moved is not None:
            return moved
        return ci_repair.after_run(ctx, config, ran.result, report, ran.decision)

    def this_round(self) -> bool:
        return True

    def reply(self, ctx: RunContext, config: RepoConfig) -> Reply | None:
        return ci_repair.reply_for(ctx, config)

    def taken(self, ctx: RunContext) -> Taken | None:
        return lambda head: ci_repair.branch_moved(ctx, head)

    def finish(self, rt: Runtime, trigger: Trigger, generation: int, outcome: str) -> None:
        """The round's outcome, for the PR body's list."""
        ci_repair.CiRounds(rt.redis, trigger.issue_key).finish(generation, outcome)


def run_kind(trigger: Trigger) -> FirstRun:
    """The one place that reads the trigger's kind for a run: a review or a CI round
    continues from the PR branch; a label or retry is a first run."""
    return {"review": ReviewRun, "ci": CiRepairRun}.get(trigger.kind, FirstRun)()
