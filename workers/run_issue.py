"""One run for one issue: workspace → sandbox → agent and tests → draft PR or failure note.

Called by the `frognano.run_issue` task with ids. Holds the per-issue lock for its
whole life, stops cooperatively when a newer trigger supersedes it, and pushes
nothing unless it is still the newest generation and the tests passed.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path
from typing import Any

from bot.github_api import GitHubError, RepoRef
from bot.logs import delivery_context, run_context
from bot.messages import (
    RunReport,
    commit_message,
    failure_comment,
    invalid_config,
    pr_body,
    refused_paths,
    status_done,
    status_failed,
    status_running,
)
from bot.repo_config import CONFIG_PATH, RepoConfigError, parse_repo_config
from bot.triggers import Trigger
from sandbox import SandboxConfig, open_sandbox
from workers.agent.harness import SolveLimits, SolveResult, solve
from workers.agent.python_setup import infer_python_setup
from workers.agent.repo_tests import detect_test_command
from workers.coordination import IssueCoordinator
from workers.hostgit import HostRepo
from workers.publish import forbidden_paths, push_and_open_pull
from workers.run_recording import RunRecorder, status_for_outcome
from workers.runtime import Runtime
from workers.status import StatusComment

log = logging.getLogger(__name__)


def run_issue(rt: Runtime, trigger: Trigger, generation: int) -> str:
    """Returns the outcome: pr_opened, failed, refused_paths, refused_size, invalid_config,
    no_tests, superseded, duplicate, or busy (another attempt holds the issue's lock; the
    task goes back to the broker and tries again)."""
    coordinator = IssueCoordinator(rt.redis, trigger.issue_key)
    if coordinator.is_done(generation):
        return "duplicate"
    lock = coordinator.wait_for_lock(generation)
    if lock == "duplicate":
        return "duplicate"
    if lock == "stale":
        coordinator.mark_done(generation)
        return "superseded"
    if lock == "timeout":  # an older run is still going: the task retries later
        return "busy"
    run_dir = rt.work_dir / f"{trigger.owner}-{trigger.repo}-{trigger.issue_number}-" \
                            f"{generation}-{uuid.uuid4().hex[:8]}"
    recorder = RunRecorder.start(
        rt.run_store, repo=f"{trigger.owner}/{trigger.repo}", issue=trigger.issue_number,
        trigger=trigger.kind, attempt=generation, delivery_id=trigger.delivery_id,
        transcript_path=transcript_path(rt, trigger, generation))
    crash = None
    try:
        with delivery_context(trigger.delivery_id), run_context(recorder.run_id), \
                coordinator.heartbeat(generation):
            outcome = _run_locked(rt, trigger, generation, coordinator, run_dir, recorder)
    except Exception as exc:
        # A crash must still leave a visible, final state on the issue.
        log.exception("run %s attempt %s crashed", trigger.issue_key, generation)
        _report_crash(rt, trigger, generation, exc)
        outcome, crash = "error", f"{type(exc).__name__}: {exc}"
    recorder.finish(status_for_outcome(outcome), outcome=outcome, error=crash)
    try:
        coordinator.mark_done(generation)
        return outcome
    finally:
        coordinator.release_lock(generation)
        shutil.rmtree(run_dir, ignore_errors=True)


def _report_crash(rt: Runtime, trigger: Trigger, generation: int, exc: Exception) -> None:
    repo = RepoRef(trigger.owner, trigger.repo, trigger.installation_id)
    if isinstance(exc, GitHubError):  # GitHub refused a step after its retries
        summary = f"GitHub refused a step of the run: {str(exc)[:300]}"
    else:
        summary = f"an internal error stopped the run ({type(exc).__name__}: {str(exc)[:300]})"
    try:
        StatusComment(rt.github, repo, trigger.issue_number).set(status_failed(
            f"{summary}. Comment `/frognano retry` to try again.", generation))
    except Exception:
        log.exception("could not report the crash of %s on GitHub", trigger.issue_key)


def transcript_path(rt: Runtime, trigger: Trigger, generation: int) -> Path:
    return (rt.transcripts_dir / trigger.owner / trigger.repo
            / f"issue-{trigger.issue_number}-attempt-{generation}.jsonl")


def _run_locked(rt: Runtime, trigger: Trigger, generation: int,
                coordinator: IssueCoordinator, run_dir: Path, recorder: RunRecorder) -> str:
    repo = RepoRef(trigger.owner, trigger.repo, trigger.installation_id)
    status = StatusComment(rt.github, repo, trigger.issue_number, rt.status_interval)
    status.set(status_running(0, 0, generation, "preparing the workspace"))
    rt.work_dir.mkdir(mode=0o711, parents=True, exist_ok=True)
    workspace, private = run_dir / "workspace", run_dir / "private"
    private.mkdir(parents=True)

    default_branch = rt.github.default_branch(repo)
    mirror = rt.repo_cache.refresh(rt.github.clone_url(repo), rt.github.installation_token(repo))
    host = HostRepo.create(mirror, default_branch, run_dir / "git", workspace,
                           max_diff_bytes=rt.max_diff_bytes)
    try:
        config = parse_repo_config(rt.github.read_file(repo, CONFIG_PATH, default_branch))
    except RepoConfigError as exc:
        rt.github.comment(repo, trigger.issue_number, invalid_config(str(exc)))
        status.set(status_failed(f"invalid `{CONFIG_PATH}`", generation))
        return "invalid_config"
    test_command = config.test or getattr(detect_test_command(workspace), "command", None)
    if not test_command:
        status.set(status_failed(
            f"no test command found; set `test:` in `{CONFIG_PATH}` on the default branch",
            generation))
        return "no_tests"

    issue = rt.github.issue(repo, trigger.issue_number)
    limits = SolveLimits(max_steps=config.max_steps, max_attempts=config.max_attempts,
                         max_seconds=min(60 * config.timeout_minutes, rt.max_run_seconds),
                         test_timeout=60 * config.test_timeout_minutes)

    def progress(kind: str, data: dict[str, Any]) -> None:
        if kind == "turn_start":
            status.set(status_running(data["step"], limits.max_steps, generation), force=False)

    path = transcript_path(rt, trigger, generation)
    inferred = None if config.setup else infer_python_setup(workspace)
    setup_command = config.setup or (inferred.command if inferred else None)
    setup_note = inferred.note if inferred else ""
    with recorder.transcript(path) as transcript, open_sandbox(
            rt.sandbox_backend, SandboxConfig(workspace=workspace, private_dir=private)
    ) as sandbox:
        transcript.write("trigger", trigger=trigger.to_kwargs(), generation=generation)
        result = solve(rt.model(), sandbox, f"{issue.title}\n\n{issue.body}".strip(),
                       test_command, transcript, repo=host, limits=limits,
                       setup_command=setup_command, setup_note=setup_note,
                       guidance=trigger.guidance, on_event=progress,
                       should_stop=lambda: coordinator.is_stale(generation))
        summary = next((r["assistant"]["content"] for r in reversed(transcript.records)
                        if r["kind"] == "turn" and r["assistant"]["content"]), "")

    if coordinator.is_stale(generation):  # the newer run owns the status comment now
        return "superseded"
    report = _report(rt, trigger, generation, result, summary)
    if not result.tests_passed:
        rt.github.comment(repo, trigger.issue_number, failure_comment(report))
        status.set(status_failed(f"`{result.exit_reason}`", generation))
        return "failed"
    snapshot = result.snapshot
    if snapshot is None:
        status.set(status_failed(f"the change could not be read: {result.error}", generation))
        return "failed"
    if snapshot.refusal:
        status.set(status_failed(snapshot.refusal, generation))
        return "refused_size"
    if not snapshot.paths:
        status.set(status_failed("the tests pass without any change; nothing to propose",
                                 generation))
        return "failed"
    forbidden = forbidden_paths(snapshot.paths, config.protected_paths)
    if forbidden:
        status.set(status_failed(refused_paths(forbidden), generation))
        return "refused_paths"
    pull = push_and_open_pull(
        github=rt.github, cache=rt.repo_cache, repo=repo, host=host, snapshot=snapshot,
        issue_number=trigger.issue_number, title=f"[FrogNano] {issue.title}",
        body=pr_body(report), base=default_branch, reviewer=trigger.actor,
        message=commit_message(issue.title, trigger.issue_number, test_command, config.ci))
    recorder.set_pr_url(pull.url)
    status.set(status_done(pull.url, generation))
    return "pr_opened"


def _report(rt: Runtime, trigger: Trigger, generation: int, result: SolveResult,
            summary: str) -> RunReport:
    url = (f"{rt.public_url.rstrip('/')}/runs/{trigger.owner}/{trigger.repo}/"
           f"{trigger.issue_number}/{generation}" if rt.public_url else None)
    return RunReport(
        issue_number=trigger.issue_number, exit_reason=result.exit_reason,
        test_command=result.test_command,
        baseline_summary=result.baseline.summary() if result.baseline else "not run",
        final_summary=result.final.summary() if result.final else "not run",
        final_output=result.final.output if result.final else result.error,
        steps=result.steps, attempts=result.attempts,
        tokens=result.usage.completion_tokens, seconds=result.seconds,
        model=rt.model().name, transcript_url=url,
        changed_tests=[f"{c.test}: {c.before or 'absent'} → {c.after or 'absent'}"
                       for c in result.changes],
        warnings=result.suspicious + dropped_warnings(result),
        test_files_changed=result.test_files_changed,
        summary=summary,
        refusals=result.verdict.reasons if result.verdict else [],
        verdict_notes=result.verdict.notes if result.verdict else [],
        new_tests=result.verdict.new_tests_summary() if result.verdict else "",
        setup_note=result.setup_note, setup_command=result.setup_command or "",
    )


def dropped_warnings(result: SolveResult) -> list[str]:
    """Nested git repositories the host left out of the commit, for the reviewer."""
    dropped = result.snapshot.dropped if result.snapshot else []
    return [f"left out of the change: `{path}` (a nested git repository; the bot never "
            "commits one)" for path in dropped]
