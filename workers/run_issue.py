"""One run for one issue: workspace → sandbox → agent and tests → draft PR or failure note.

The run itself is solver/run.py's, shared with `frognano solve`; this module adds
what only the bot does: the lock, the mirror, the config from the default branch, the
status comment, and applying the decision on GitHub.

Called by the `frognano.run_issue` task with ids. Holds the per-issue lock for its
whole life, stops cooperatively when a newer trigger supersedes it, and pushes
nothing unless it is still the newest generation and the tests passed.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from pathlib import Path

from bot.git_data import with_co_author
from bot.github_api import Forbidden, GitHubError, NotAFile, RateLimited
from bot.logs import delivery_context, run_context
from bot.messages import (
    ChangedFile,
    ReadFirst,
    RunReport,
    commit_message,
    invalid_config,
    permission_missing_summary,
    rate_limited_summary,
)
from bot.triggers import Trigger
from sandbox.trees import remove_tree
from solver.agent.harness import RunPlan
from solver.agent.result import SolveResult
from solver.agent.run_events import EventOutput, Outputs, Triggered
from solver.defaults import RunDefaults
from solver.driver import drive
from solver.hostgit import HostRepo
from solver.policy import branch_for, not_installed_note
from solver.repo_config import CONFIG_PATH, RepoConfig, RepoConfigError, parse_repo_config
from solver.run import (
    NoTestCommand,
    NoTests,
    RunOutcome,
    RunRequest,
    Workspace,
)
from workers import ci_repair
from workers.context import RunContext
from workers.coordination import IssueCoordinator
from workers.run_kinds import FirstRun, run_kind
from workers.run_recording import RunRecorder, status_for_outcome
from workers.runtime import Runtime
from workers.status import RunStatus

log = logging.getLogger(__name__)


def run_issue(rt: Runtime, trigger: Trigger, generation: int) -> str:
    """Returns the outcome: pr_opened, pushed (a review's change on the PR), conflict
    or replay_failed (a review's change on a moved branch: no clean replay, or its re-run
    tests failed), branch_moved (a CI repair round's branch moved: nothing pushed),
    failed, no_change, refused_paths, refused_size, invalid_config, no_tests, superseded,
    cancelled, duplicate, or busy (another run holds the issue's lock; the task goes back
    to the broker and tries again)."""
    coordinator = IssueCoordinator(rt.redis, trigger.issue_key)
    if coordinator.is_done(generation):
        return "duplicate"
    lock = coordinator.wait_for_lock(generation)
    if lock == "duplicate":
        return "duplicate"
    if lock == "stale":  # superseded or cancelled while queued
        coordinator.mark_done(generation)
        return coordinator.stop_reason()[0]
    if lock == "timeout":  # an older run is still going: the task retries later
        return "busy"
    run_dir = rt.work_dir / f"{trigger.owner}-{trigger.repo}-{trigger.issue_number}-" \
                            f"{generation}-{uuid.uuid4().hex[:8]}"
    recorder = RunRecorder.start(
        rt.run_store, repo=f"{trigger.owner}/{trigger.repo}", issue=trigger.issue_number,
        trigger=trigger.kind, run_number=generation, delivery_id=trigger.delivery_id,
        transcript_path=transcript_path(rt, trigger, generation))
    ctx = RunContext(rt, trigger, generation, coordinator,
                     RunStatus.of(rt.github, trigger, generation, rt.status_interval), recorder)
    crash = None
    try:
        with delivery_context(trigger.delivery_id), run_context(recorder.run_id), \
                coordinator.heartbeat(generation):
            outcome = _run_locked(ctx, run_dir)
    except Exception as exc:
        # A crash must still leave a visible, final state on the issue.
        log.exception("run %s (run number %s) crashed", trigger.issue_key, generation)
        _report_crash(ctx, exc)
        outcome, crash = "error", f"{type(exc).__name__}: {exc}"
    recorder.finish(status_for_outcome(outcome), outcome=outcome, error=crash)
    run_kind(trigger).finish(rt, trigger, generation, outcome)
    try:
        coordinator.mark_done(generation)
        return outcome
    finally:
        coordinator.release_lock(generation)
        remove_tree(run_dir)  # however deep the sandbox nested it


def _report_crash(ctx: RunContext, exc: Exception) -> None:
    """The final status after a run stopped by an exception, saying what to do next: when
    to retry after a rate limit, which permission to grant after a 403, how to fix a
    config that is not a file. GitHub may refuse this comment too (a rate limit on every
    call, no issues permission): then the log and the run record keep the reason."""
    github, repo, trigger = ctx.github, ctx.repo, ctx.trigger
    retry = ". Comment `/frognano retry` to try again."
    if isinstance(exc, NotAFile) and exc.path == CONFIG_PATH:
        summary, retry = f"invalid `{CONFIG_PATH}`", ""
        try:
            github.comment(repo, trigger.issue_number, invalid_config(
                f"{exc}: it must be a YAML file of settings."))
        except GitHubError:  # the status comment below still says it
            log.exception("could not post the invalid-config note on %s", trigger.issue_key)
    elif isinstance(exc, RateLimited):
        summary, retry = rate_limited_summary(exc.reset_at), "."
    elif isinstance(exc, Forbidden):
        summary, retry = permission_missing_summary(exc.missing_permission,
                                                    str(exc)[:200]), "."
    elif isinstance(exc, GitHubError):  # GitHub refused a step after its retries
        summary = f"GitHub refused a step of the run: {str(exc)[:300]}"
    else:
        summary = f"an internal error stopped the run ({type(exc).__name__}: {str(exc)[:300]})"
    try:
        ctx.status.failed(summary + retry)
    except Exception:
        log.exception("could not report the crash of %s on GitHub", trigger.issue_key)


def transcript_path(rt: Runtime, trigger: Trigger, generation: int, candidate: int = 0
                    ) -> Path:
    """The first candidate's keeps the single run's name; candidate k of several adds k + 1.
    Named by the run number (`generation`); the record keeps each run's own path."""
    extra = f"-{candidate + 1}" if candidate else ""
    return (rt.transcripts_dir / trigger.owner / trigger.repo
            / f"issue-{trigger.issue_number}-run-{generation}{extra}.jsonl")


def _no_tests_summary(exc: NoTestCommand) -> str:
    """Why there is nothing to run: no test file at all is another fact than a suite
    whose command was not found, and asks for another remedy."""
    if isinstance(exc, NoTests):
        return ("the repository has no tests (no test file at all), so there is nothing to "
                f"judge a fix by; add tests, or set `test:` in `{CONFIG_PATH}` on the "
                "default branch")
    return f"no test command found; set `test:` in `{CONFIG_PATH}` on the default branch"


def _run_locked(ctx: RunContext, run_dir: Path) -> str:
    """The kind's checks before the run, the config from the default branch, then the one
    driver (solver/driver.py) with the operator's defaults."""
    rt, trigger, kind = ctx.runtime, ctx.trigger, run_kind(ctx.trigger)
    ctx.status.preparing()
    default_branch = rt.github.default_branch(ctx.repo)
    mirror = rt.repo_cache.refresh(rt.github.clone_url(ctx.repo),
                                   rt.github.installation_token(ctx.repo))
    if (ended := kind.before_run(ctx, mirror)) is not None:
        return ended
    config = _read_config(ctx, default_branch)
    if config is None:
        return "invalid_config"
    issue = rt.github.issue(ctx.repo, trigger.issue_number)
    return drive(BotRun(ctx, kind, config, kind.workspace(rt, trigger, default_branch,
                                                          mirror, run_dir),
                        issue.title, issue.body, default_branch), rt.defaults)


@dataclass(frozen=True)
class BotRun:
    """One run of the bot of its kind (workers/run_kinds.py), bound to its context: the
    driver's kind (solver/driver.RunKind)."""

    ctx: RunContext
    kind: FirstRun
    config: RepoConfig
    workspace: Workspace
    title: str  # the issue's
    body: str
    default_branch: str

    def request(self, defaults: RunDefaults) -> RunRequest:
        return _run_request(self.ctx, self.kind, self.workspace, self.config,
                            f"{self.title}\n\n{self.body}".strip(), defaults)

    def no_tests(self, error: NoTestCommand) -> str:
        self.ctx.status.failed(_no_tests_summary(error))
        return "no_tests"

    def apply(self, ran: RunOutcome) -> str:
        """Stopped when superseded or cancelled; else the kind's checks, then its `apply`
        or why nothing is published."""
        ctx, kind, trigger = self.ctx, self.kind, self.ctx.trigger
        if not ctx.is_current():  # the newer run owns the status comment now
            outcome, reason = ctx.coordinator.stop_reason()
            if reason is not None:  # a cancel: a progress edit may have landed after its own
                ctx.status.cancelled(reason)
            return outcome
        # What the evidence ran on: the default branch, or for a review the PR's branch.
        report = _report(ctx.runtime, trigger, ctx.generation, ran.result, ran,
                         (self.title, kind.branch(trigger, self.default_branch)))
        report = ci_repair.with_rounds(ctx, report, ran.decision.action == "publish",
                                       this_round=kind.this_round())
        if (ended := kind.after_run(ctx, ran, self.config, report)) is not None:
            return ended
        if ran.decision.action != "publish":
            return kind.not_published(ctx, ran.result, report, ran.decision)
        # The person who asked is credited: GitHub makes the App's bot the author of the
        # commits it signs (workers/publish/api_commit.py).
        message = with_co_author(commit_message(self.title, trigger.issue_number,
                                                ran.plan.test_command, self.config.ci),
                                 trigger.actor, trigger.actor_id)
        return kind.apply(ctx, ran, report, message,
                          lambda k: transcript_path(ctx.runtime, trigger, ctx.generation, k))


def _read_config(ctx: RunContext, default_branch: str) -> RepoConfig | None:
    """The repository's config, from the default branch on GitHub (an issue author cannot
    change it); None when it is invalid, which the issue and the status comment say."""
    try:
        return parse_repo_config(ctx.github.read_file(ctx.repo, CONFIG_PATH, default_branch))
    except RepoConfigError as exc:
        ctx.github.comment(ctx.repo, ctx.trigger.issue_number, invalid_config(str(exc)))
        ctx.status.failed(f"invalid `{CONFIG_PATH}`")
        return None


def _run_request(ctx: RunContext, kind: FirstRun, workspace: Workspace, config: RepoConfig,
                 issue: str, defaults: RunDefaults) -> RunRequest:
    """The bot's run (solver/run.py): the config from the default branch, the operator's
    limits and ceiling, the run record and the status comment hearing every candidate;
    the kind's guidance, candidates and extra stop."""
    rt, trigger, generation, recorder = ctx.runtime, ctx.trigger, ctx.generation, ctx.recorder
    triggered = Triggered(trigger=trigger.to_kwargs(), generation=generation)
    watch = kind.stops()  # a CI repair stops after a baseline that passes

    def planned(plan: RunPlan, host: HostRepo) -> EventOutput:
        recorder.emit(triggered)
        return Outputs(recorder, ctx.status.progress(plan.limits.max_steps),
                       *([watch] if watch is not None else []))

    return RunRequest(
        issue=issue, workspace=workspace, defaults=defaults,
        transcript_for=lambda k: transcript_path(rt, trigger, generation, k),
        config=config, guidance=kind.guidance(ctx, config), candidates=kind.candidates,
        opening=triggered, on_planned=planned,
        should_stop=lambda: not ctx.is_current() or (watch is not None and watch.passed))


def _report(rt: Runtime, trigger: Trigger, generation: int, result: SolveResult,
            ran: RunOutcome, titled: tuple[str, str] = ("", "")) -> RunReport:
    """`titled`: the issue's title and the branch the change goes into."""
    title, base_branch = titled
    url = (f"{rt.public_url.rstrip('/')}/runs/{trigger.owner}/{trigger.repo}/"
           f"{trigger.issue_number}/{generation}" if rt.public_url else None)
    verdict = result.verdict
    # Failing before and after, or flaky: the PR lists them apart, never as the change's.
    excused = {*verdict.preexisting, *verdict.flaky} if verdict else set()
    return RunReport(
        issue_number=trigger.issue_number, exit_reason=result.exit_reason,
        test_command=result.test_command,
        baseline_summary=result.baseline.summary() if result.baseline else "not run",
        final_summary=result.final.summary() if result.final else "not run",
        final_output=result.final.output if result.final else result.error,
        steps=result.steps, rounds=result.rounds,
        tokens=result.usage.completion_tokens, seconds=result.seconds,
        model=ran.model, transcript_url=url, best_of=ran.report(),
        changed_tests=[f"{c.test}: {c.before or 'absent'} → {c.after or 'absent'}"
                       for c in result.changes],
        warnings=result.suspicious + dropped_warnings(result)
        + setup_warnings(ran.host, result),
        test_files_changed=result.test_files_changed,
        summary=result.summary,
        verdict_reasons=result.verdict.reasons if result.verdict else [],
        verdict_notes=result.verdict.notes if result.verdict else [],
        new_tests=result.verdict.new_tests_summary() if result.verdict else "",
        setup_note=result.setup_note, setup_command=result.setup_command or "",
        read_first=[ReadFirst(f.path, f.line, f.what, f.why)
                    for f in (result.verdict.read_first if result.verdict else [])],
        issue_title=title, branch=branch_for(trigger.issue_number),
        changed_files=[ChangedFile(*stat) for stat in ran.host.numstat(
            result.snapshot.tree)] if result.snapshot else [],
        still_failing=sorted(t for t, state in (result.final.tests if result.final else {})
                             .items() if state in ("failed", "error") and t not in excused),
        preexisting=list(verdict.preexisting) if verdict else [],
        flaky=list(verdict.flaky) if verdict else [],
        evidence=list(verdict.evidence) if verdict else [], base_branch=base_branch,
        services=result.services,
    )


def setup_warnings(host: HostRepo, result: SolveResult) -> list[str]:
    """The branch's edits to what setup reads, which the run never installed."""
    note = not_installed_note(host, result.snapshot.paths if result.snapshot else [])
    return [note] if note else []


def dropped_warnings(result: SolveResult) -> list[str]:
    """Nested git repositories the host left out of the commit, for the reviewer."""
    dropped = result.snapshot.dropped if result.snapshot else []
    return [f"left out of the change: `{path}` (a nested git repository; the bot never "
            "commits one)" for path in dropped]
