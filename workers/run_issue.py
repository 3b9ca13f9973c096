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
from pathlib import Path

from bot.git_data import with_co_author
from bot.github_api import Forbidden, GitHubError, NotAFile, RateLimited
from bot.logs import delivery_context, run_context
from bot.messages import (
    ChangedFile,
    ReadFirst,
    RunReport,
    commit_message,
    decision_reason,
    failure_comment,
    invalid_config,
    permission_missing_summary,
    pr_body,
    pull_title,
    rate_limited_summary,
    review_not_pushed,
)
from bot.triggers import Trigger
from sandbox.trees import remove_tree
from solver.agent.harness import RunPlan
from solver.agent.prompts import review_comments_text
from solver.agent.result import SolveResult
from solver.agent.run_events import EventOutput, Outputs, Triggered
from solver.agent.transcript import Transcript
from solver.hostgit import HostRepo
from solver.policy import bot_identity, branch_for, not_installed_note
from solver.repo_config import CONFIG_PATH, RepoConfig, RepoConfigError, parse_repo_config
from solver.run import (
    BestOfN,
    Decision,
    NoTestCommand,
    NoTests,
    OwnCommits,
    RunOutcome,
    RunRequest,
    Workspace,
    run,
)
from workers import ci_repair
from workers.context import RunContext
from workers.coordination import IssueCoordinator
from workers.publish.pull import DraftPull, publish_pull
from workers.publish.review import ReviewChange, publish_review
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
    ci_repair.finish_round(rt, trigger, generation, outcome)
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
    rt, trigger, generation, recorder = ctx.runtime, ctx.trigger, ctx.generation, ctx.recorder
    repo, status = ctx.repo, ctx.status
    status.preparing()
    default_branch = rt.github.default_branch(repo)
    mirror = rt.repo_cache.refresh(rt.github.clone_url(repo), rt.github.installation_token(repo))
    reviewing = trigger.kind in ci_repair.REVIEW_LIKE
    ci_repair.person_started(rt, trigger)
    if trigger.kind == "ci" and (ended := ci_repair.stop_if_moved(  # pushed to meanwhile
            ctx, ci_repair.mirror_head(mirror, trigger))):
        return ended
    config = _read_config(ctx, default_branch)
    if config is None:
        return "invalid_config"
    issue = rt.github.issue(repo, trigger.issue_number)
    request = _run_request(ctx, _workspace(rt, trigger, default_branch, mirror, run_dir),
                           config, f"{issue.title}\n\n{issue.body}".strip())
    try:
        ran = run(request)
    except NoTestCommand as exc:
        status.failed(_no_tests_summary(exc))
        return "no_tests"
    host, result, plan = ran.host, ran.result, ran.plan

    if not ctx.is_current():  # the newer run owns the status comment now
        outcome, reason = ctx.coordinator.stop_reason()
        if reason is not None:  # a cancel: a progress edit may have landed after its own
            status.cancelled(reason)
        return outcome
    if trigger.kind == "ci" and (ended := ci_repair.stop_if_moved(ctx, host.base)):
        return ended  # the mirror moved between the check above and the workspace
    # What the evidence ran on: the default branch, or for a review the PR's branch.
    base = branch_for(trigger.issue_number) if reviewing else default_branch
    report = _report(rt, trigger, generation, result, ran, (issue.title, base))
    decision = ran.decision
    report = ci_repair.with_rounds(ctx, report, decision.action == "publish")
    if trigger.kind == "ci":  # not reproduced, or nothing to push: said on the PR
        ended = ci_repair.after_run(ctx, config, result, report, decision)
        if ended is not None:
            return ended
    if decision.action != "publish":
        return _not_published(ctx, result, report, decision, reviewing)
    # The person who asked is credited: GitHub makes the App's bot the author of the
    # commits it signs (workers/publish/api_commit.py).
    message = with_co_author(commit_message(issue.title, trigger.issue_number,
                                            plan.test_command, config.ci),
                             trigger.actor, trigger.actor_id)
    if reviewing:  # one candidate: its transcript is the first's, appended to by a replay
        with Transcript(transcript_path(rt, trigger, generation)) as transcript:
            return publish_review(ctx, host, result, report, ReviewChange(
                title=pull_title(issue.title), message=message,
                replay=ran.replay(), events=Outputs(transcript, recorder),
                reply=ci_repair.reply_for(ctx, config) if trigger.kind == "ci" else None,
                taken=(lambda head: ci_repair.branch_moved(ctx, head))
                if trigger.kind == "ci" else None))
    assert result.snapshot is not None  # decide() publishes only a readable change
    # A cancel is honoured up to the push; after an accepted push the PR steps finish.
    return publish_pull(ctx, host, result.snapshot, DraftPull(
        title=pull_title(issue.title), body=pr_body(report), base=default_branch,
        message=message, careful=bool(report.read_first),
        unverified=not decision.verified))


def _read_config(ctx: RunContext, default_branch: str) -> RepoConfig | None:
    """The repository's config, from the default branch on GitHub (an issue author cannot
    change it); None when it is invalid, which the issue and the status comment say."""
    try:
        return parse_repo_config(ctx.github.read_file(ctx.repo, CONFIG_PATH, default_branch))
    except RepoConfigError as exc:
        ctx.github.comment(ctx.repo, ctx.trigger.issue_number, invalid_config(str(exc)))
        ctx.status.failed(f"invalid `{CONFIG_PATH}`")
        return None


def _not_published(ctx: RunContext, result: SolveResult, report: RunReport,
                   decision: Decision, reviewing: bool) -> str:
    """Say why nothing is published: on the PR for a review's run, on the issue when the
    tests still fail; the status comment either way."""
    rt, trigger, repo = ctx.runtime, ctx.trigger, ctx.repo
    if reviewing and trigger.pull_number is not None:
        rt.github.comment(repo, trigger.pull_number, failure_comment(report)
                          if not result.tests_passed else review_not_pushed(
                              decision_reason(decision)))
    elif not result.tests_passed:
        rt.github.comment(repo, trigger.issue_number, failure_comment(report))
    ctx.status.failed(decision_reason(decision))
    return decision.outcome


def _workspace(rt: Runtime, trigger: Trigger, default_branch: str, mirror: Path,
               run_dir: Path) -> Workspace:
    """A review continues from the PR branch's head (a human's commits on it included),
    is judged by the repository's tests, not the model's from its last run, and its setup
    runs none of the model's files (the default branch plus people's)."""
    reviewing = trigger.kind in ci_repair.REVIEW_LIKE
    own = OwnCommits(f"refs/heads/{default_branch}", bot_identity(rt.github.bot_login())[1]) \
        if reviewing else None
    return Workspace(source=mirror, run_dir=run_dir, max_diff_bytes=rt.max_diff_bytes,
                     branch=branch_for(trigger.issue_number) if reviewing else default_branch,
                     own_commits=own)


def _run_request(ctx: RunContext, workspace: Workspace, config: RepoConfig, issue: str
                 ) -> RunRequest:
    """The bot's run (solver/run.py): the config from the default branch, the operator's
    limits and ceiling, the run record and the status comment hearing every candidate."""
    rt, trigger, generation, recorder = ctx.runtime, ctx.trigger, ctx.generation, ctx.recorder
    triggered = Triggered(trigger=trigger.to_kwargs(), generation=generation)
    # A CI repair stops after a baseline that passes: that failure does not reproduce.
    watch = ci_repair.BaselineWatch()

    def planned(plan: RunPlan, host: HostRepo) -> EventOutput:
        recorder.emit(triggered)
        return Outputs(recorder, ctx.status.progress(plan.limits.max_steps), watch)

    return RunRequest(
        issue=issue, workspace=workspace, model_for=rt.model_factory,
        transcript_for=lambda k: transcript_path(rt, trigger, generation, k),
        config=config, limits=rt.limits,
        guidance=ci_repair.start_round(ctx, config) if trigger.kind == "ci" else _guidance(ctx),
        max_run_seconds=rt.max_run_seconds,
        # Best of N; a review's run is one candidate, on the PR's head.
        best_of=BestOfN(asked=1 if trigger.kind in ci_repair.REVIEW_LIKE else None,
                        allowed=rt.max_candidates, slots=rt.model_slots, seed=rt.seed),
        sandbox_backend=rt.sandbox_backend, package_index=rt.package_index,
        opening=triggered, on_planned=planned,
        should_stop=lambda: not ctx.is_current() or (trigger.kind == "ci" and watch.passed))


def _guidance(ctx: RunContext) -> str:
    """The trigger's text; for a submitted review, its line comments (file, line, diff
    hunk) too, which the webhook does not carry. The bot's own comments are left out."""
    trigger = ctx.trigger
    if trigger.review_id is None or trigger.pull_number is None:
        return trigger.guidance
    bot = ctx.github.bot_login()
    comments = [c for c in ctx.github.review_comments(ctx.repo, trigger.pull_number,
                                                      trigger.review_id) if c.author != bot]
    return "\n\n".join(p for p in (trigger.guidance, review_comments_text(comments)) if p)


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
