"""Our outer loop around Leaf's: the harness, not the model, decides when the work is done.

setup → baseline → agent → verdict → (the refusal back to the model → agent → verdict)…
until the verdict accepts or a budget (steps, wall time, context, attempts) runs out.
The baseline and every verdict run in a fresh sandbox on a tree the host chose
(verdict_run.py); the verdict counts only the repository's original tests (verdict.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.base import Sandbox, SandboxError
from workers.agent.loop import EventSink, LoopLimits, LoopState, no_events, run_agent
from workers.agent.prompts import (
    SYSTEM_PROMPT,
    baseline_unusable_message,
    task_message,
    verdict_feedback_message,
)
from workers.agent.repo_tests import TestChange, TestVerdict, compare_results
from workers.agent.transcript import Transcript
from workers.agent.verdict import Verdict
from workers.agent.verdict_run import Judgement, SandboxFactory, VerdictRunner
from workers.hostgit import GitError, HostRepo, Snapshot
from workers.models.base import ModelClient, Usage

# Inner exits after which another attempt makes sense if the tests still fail.
_RETRYABLE_EXITS = ("agent", "max_tokens_per_turn")


@dataclass(frozen=True)
class SolveLimits:
    max_steps: int = 100
    max_attempts: int = 3
    max_seconds: float = 3600.0
    max_context_tokens: int = 65_536
    max_tokens_per_turn: int = 8_192
    test_timeout: float = 900.0
    setup_timeout: float = 1200.0


@dataclass
class SolveResult:
    # "tests_passed", a loop exit reason, "max_attempts", "setup_failed", "baseline_unusable"
    exit_reason: str
    tests_passed: bool  # the verdict accepted the change
    diff: str
    test_command: str
    baseline: TestVerdict | None
    final: TestVerdict | None
    attempts: int
    steps: int
    usage: Usage
    seconds: float
    changes: list[TestChange] = field(default_factory=list)
    suspicious: list[str] = field(default_factory=list)
    test_files_changed: list[str] = field(default_factory=list)
    tool_calls: dict[str, int] = field(default_factory=dict)
    error: str = ""
    snapshot: Snapshot | None = None
    verdict: Verdict | None = None  # the last verdict (None: none was reached)
    with_model_tests: TestVerdict | None = None
    setup_command: str | None = None
    setup_note: str = ""  # how the setup command was chosen, when it was inferred
    snapshot: Snapshot | None = None  # the host's view of the change (workers/hostgit.py)

    def totals(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "steps": self.steps,
            "seconds": round(self.seconds, 3),
            "usage": self.usage.to_dict(),
            "tool_calls": self.tool_calls,
        }


_FIRST_ERROR = re.compile(r"^E\s+(\S*(?:Error|Exception)\b.*)$|^(\S*Error: .*)$", re.MULTILINE)


def baseline_problem(baseline: TestVerdict) -> str | None:
    """Why the baseline cannot serve as one (the agent would fix nothing), or None."""
    if baseline.timed_out:
        return "the baseline test run timed out"
    if baseline.exit_code in (126, 127):
        what = "was not found" if baseline.exit_code == 127 else "cannot be executed"
        return f"the test command `{baseline.command}` {what} (exit {baseline.exit_code})"
    pytest_like = baseline.report == "junit" or "pytest" in baseline.command
    collect_errors = [t for t, s in baseline.tests.items() if s == "error" and "::" not in t]
    if pytest_like and (baseline.exit_code in (2, 3, 4, 5) or collect_errors):
        found = _FIRST_ERROR.search(baseline.output)
        detail = next((g for g in found.groups() if g), "") if found else ""
        where = f" in {', '.join(collect_errors[:3])}" if collect_errors else ""
        kind = "no tests were collected" if baseline.exit_code == 5 else \
            "the tests could not be collected"
        return (f"{kind}{where} (pytest exit {baseline.exit_code}"
                + (f": {detail.strip()[:200]}" if detail else "") + ")")
    return None


def solve(model: ModelClient, sandbox: Sandbox, issue: str, test_command: str,
          transcript: Transcript, *, repo: HostRepo, limits: SolveLimits = SolveLimits(),
          setup_command: str | None = None, setup_note: str = "", guidance: str = "",
          on_event: EventSink = no_events,
          should_stop: Callable[[], bool] = lambda: False,
          open_verdict_sandbox: SandboxFactory | None = None,
          scratch_dir: Path | None = None) -> SolveResult:
    """`scratch_dir` holds the harness's own test trees (default: next to the sandbox's
    private dir); it must be reachable by the sandbox uid, like the workspace."""
    started = time.monotonic()
    deadline = started + limits.max_seconds
    task = task_message(issue, test_command, guidance)
    transcript.write("run", model=model.name, test_command=test_command,
                     setup_command=setup_command, setup_note=setup_note,
                     limits=limits.__dict__,
                     sampling=getattr(getattr(model, "sampling", None), "__dict__", None),
                     seed=getattr(model, "seed", None), task=task)
    state = LoopState(messages=[
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task},
    ])
    private_dir: Path = sandbox.config.private_dir  # type: ignore[attr-defined]
    runner = VerdictRunner(sandbox, repo, test_command,
                           scratch_dir or private_dir.parent / "harness",
                           open_sandbox=open_verdict_sandbox)
    judged: Judgement | None = None  # the verdict on the tree as it is now, if any

    def finish(reason: str, baseline: TestVerdict | None, attempts: int,
               error: str = "") -> SolveResult:
        problems = [error or state.last_error]
        snapshot: Snapshot | None = judged.snapshot if judged else None
        if snapshot is None:
            try:
                sandbox.stop()  # nothing may still be writing the tree the host snapshots
                snapshot = repo.snapshot()
            except (SandboxError, GitError) as exc:
                problems.append(f"could not compute the diff: {exc}")
        diff = snapshot.diff if snapshot else ""
        final = judged.final if judged else None
        verdict = judged.verdict if judged else None
        changes = compare_results(baseline.tests if baseline else {},
                                  final.tests if final else {})
        warnings = list(verdict.reasons if verdict and not verdict.accepted else [])
        warnings += [f"the agent phase added or changed a start-up hook in the venv: {p} "
                     "(the verdict ran with the venv as setup left it)"
                     for p in runner.venv_changes()]
        result = SolveResult(
            exit_reason=reason, tests_passed=bool(verdict and verdict.accepted), diff=diff,
            test_command=test_command, baseline=baseline, final=final, attempts=attempts,
            steps=state.steps, usage=state.usage, seconds=time.monotonic() - started,
            changes=changes, suspicious=warnings,
            test_files_changed=judged.plan.model_tests if judged else [],
            tool_calls=state.tool_calls, error="; ".join(p for p in problems if p),
            snapshot=snapshot, verdict=verdict,
            with_model_tests=judged.with_model_tests if judged else None,
            setup_command=setup_command, setup_note=setup_note,
        )
        transcript.write("result", exit_reason=reason, tests_passed=result.tests_passed,
                         baseline=baseline.to_dict() if baseline else None,
                         final=final.to_dict() if final else None,
                         verdict=verdict.to_dict() if verdict else None,
                         changes=[c.__dict__ for c in changes], suspicious=result.suspicious,
                         test_files_changed=result.test_files_changed, diff=diff,
                         totals=result.totals(), error=result.error)
        on_event("result", {"exit_reason": reason, "tests_passed": result.tests_passed})
        return result

    if setup_command:
        on_event("setup", {"command": setup_command})
        setup = sandbox.exec(setup_command, network=True,
                             timeout=min(limits.setup_timeout, limits.max_seconds))
        transcript.write("setup", command=setup_command, note=setup_note,
                         exit_code=setup.exit_code, timed_out=setup.timed_out,
                         seconds=round(setup.seconds, 3),
                         output_tail=(setup.stdout + setup.stderr)[-4000:])
        if not setup.ok:
            return finish("setup_failed", None, 0,
                          error=f"setup command `{setup_command}` "
                                + ("timed out" if setup.timed_out
                                   else f"failed with exit code {setup.exit_code}")
                                + (f" ({setup_note})" if setup_note else ""))

    on_event("tests", {"phase": "baseline", "command": test_command})
    try:
        runner.capture_setup()
        baseline = runner.baseline(limits.test_timeout)
    except (SandboxError, GitError, OSError) as exc:
        return finish("tool_error", None, 0,
                      error=f"the sandbox failed running the baseline tests: {exc}")
    transcript.write("baseline", **baseline.to_dict())
    on_event("tests_done", {"phase": "baseline", "verdict": baseline})
    problem = baseline_problem(baseline)
    if problem:
        return finish("baseline_unusable", baseline, 0,
                      error=baseline_unusable_message(problem, baseline.output))

    attempt = 0
    while True:
        loop_limits = LoopLimits(max_steps=limits.max_steps,
                                 max_context_tokens=limits.max_context_tokens,
                                 max_tokens_per_turn=limits.max_tokens_per_turn,
                                 deadline=deadline)
        judged = None
        try:
            exit_reason: str = run_agent(model, sandbox, state, loop_limits, transcript,
                                         attempt=attempt, on_event=on_event,
                                         should_stop=should_stop)
        except SandboxError as exc:  # the sandbox died outside a tool call
            state.last_error = str(exc)
            exit_reason = "tool_error"
        attempt += 1
        if exit_reason in ("cancelled", "tool_error"):
            # Nothing to verify: the run was stopped, or the sandbox itself is broken.
            return finish(exit_reason, baseline, attempt)
        on_event("tests", {"phase": "after", "attempt": attempt, "command": test_command})
        try:
            judged = runner.judge(baseline, max(
                1.0, min(limits.test_timeout, deadline - time.monotonic() + 60)))
        except (SandboxError, GitError, OSError) as exc:
            state.last_error = f"the sandbox failed running the tests: {exc}"
            return finish("tool_error", baseline, attempt)
        verdict, final = judged.verdict, judged.final
        transcript.write("tests", attempt=attempt, exit_reason=exit_reason, **final.to_dict(),
                         verdict=verdict.to_dict(),
                         model_tests=judged.with_model_tests.to_dict()
                         if judged.with_model_tests else None)
        on_event("tests_done", {"phase": "after", "verdict": final, "judgement": verdict})
        if verdict.accepted:
            return finish("tests_passed", baseline, attempt)
        out_of_attempts = attempt >= limits.max_attempts
        if exit_reason not in _RETRYABLE_EXITS or (out_of_attempts and exit_reason != "agent"):
            return finish(exit_reason, baseline, attempt)
        if out_of_attempts:
            return finish("max_attempts", baseline, attempt)
        if state.steps >= limits.max_steps:
            return finish("max_turns", baseline, attempt)
        if time.monotonic() >= deadline:
            return finish("max_time", baseline, attempt)
        feedback = verdict_feedback_message(test_command, verdict.reasons, final.output,
                                            attempt, limits.max_attempts - attempt - 1)
        state.messages.append({"role": "user", "content": feedback})
        transcript.write("feedback", attempt=attempt, content=feedback)
