"""Our outer loop around Leaf's: the harness, not the model, decides when the work is done.

baseline tests → agent → tests → (failing output back to the model → agent → tests)…
until the tests pass or a budget (steps, wall time, context, attempts) runs out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox.base import Sandbox, SandboxError
from workers.agent.loop import EventSink, LoopLimits, LoopState, no_events, run_agent
from workers.agent.prompts import SYSTEM_PROMPT, task_message, test_feedback_message
from workers.agent.repo_tests import (
    TestChange,
    TestVerdict,
    compare_results,
    parse_test_results,
    suspicious_test_changes,
    touched_test_files,
)
from workers.agent.transcript import Transcript
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
    exit_reason: str  # "tests_passed", a loop exit reason, "max_attempts" or "setup_failed"
    tests_passed: bool
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
    snapshot: Snapshot | None = None  # the host's view of the change (workers/hostgit.py)

    def totals(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "steps": self.steps,
            "seconds": round(self.seconds, 3),
            "usage": self.usage.to_dict(),
            "tool_calls": self.tool_calls,
        }


def run_tests(sandbox: Sandbox, command: str, timeout: float) -> TestVerdict:
    result = sandbox.exec(command, timeout=timeout)
    output = result.stdout + ("\n" + result.stderr if result.stderr else "")
    return TestVerdict(command=command, exit_code=result.exit_code, timed_out=result.timed_out,
                       seconds=result.seconds, output=output,
                       tests=parse_test_results(output))


def solve(model: ModelClient, sandbox: Sandbox, issue: str, test_command: str,
          transcript: Transcript, *, repo: HostRepo, limits: SolveLimits = SolveLimits(),
          setup_command: str | None = None, guidance: str = "",
          on_event: EventSink = no_events,
          should_stop: Callable[[], bool] = lambda: False) -> SolveResult:
    started = time.monotonic()
    deadline = started + limits.max_seconds
    task = task_message(issue, test_command, guidance)
    transcript.write("run", model=model.name, test_command=test_command,
                     setup_command=setup_command, limits=limits.__dict__,
                     sampling=getattr(getattr(model, "sampling", None), "__dict__", None),
                     seed=getattr(model, "seed", None), task=task)
    state = LoopState(messages=[
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task},
    ])

    def finish(reason: str, baseline: TestVerdict | None, final: TestVerdict | None,
               attempts: int, error: str = "") -> SolveResult:
        problems = [error or state.last_error]
        snapshot: Snapshot | None = None
        try:
            sandbox.stop()  # nothing may still be writing the tree the host snapshots
            snapshot = repo.snapshot()
            diff = snapshot.diff
        except (SandboxError, GitError) as exc:
            diff = ""
            problems.append(f"could not compute the diff: {exc}")
        changes = compare_results(baseline.tests if baseline else {},
                                  final.tests if final else {})
        result = SolveResult(
            exit_reason=reason, tests_passed=bool(final and final.passed), diff=diff,
            test_command=test_command, baseline=baseline, final=final, attempts=attempts,
            steps=state.steps, usage=state.usage, seconds=time.monotonic() - started,
            changes=changes, suspicious=suspicious_test_changes(diff, changes),
            test_files_changed=touched_test_files(diff), tool_calls=state.tool_calls,
            error="; ".join(p for p in problems if p), snapshot=snapshot,
        )
        transcript.write("result", exit_reason=reason, tests_passed=result.tests_passed,
                         baseline=baseline.to_dict() if baseline else None,
                         final=final.to_dict() if final else None,
                         changes=[c.__dict__ for c in changes], suspicious=result.suspicious,
                         test_files_changed=result.test_files_changed, diff=diff,
                         totals=result.totals(), error=result.error)
        on_event("result", {"exit_reason": reason, "tests_passed": result.tests_passed})
        return result

    if setup_command:
        on_event("setup", {"command": setup_command})
        setup = sandbox.exec(setup_command, network=True,
                             timeout=min(limits.setup_timeout, limits.max_seconds))
        transcript.write("setup", command=setup_command, exit_code=setup.exit_code,
                         timed_out=setup.timed_out, seconds=round(setup.seconds, 3),
                         output_tail=(setup.stdout + setup.stderr)[-4000:])
        if not setup.ok:
            return finish("setup_failed", None, None, 0,
                          error=f"setup command `{setup_command}` "
                                + ("timed out" if setup.timed_out
                                   else f"failed with exit code {setup.exit_code}"))

    on_event("tests", {"phase": "baseline", "command": test_command})
    try:
        baseline = run_tests(sandbox, test_command, limits.test_timeout)
    except SandboxError as exc:
        return finish("tool_error", None, None, 0,
                      error=f"the sandbox failed running the baseline tests: {exc}")
    transcript.write("baseline", **baseline.to_dict())
    on_event("tests_done", {"phase": "baseline", "verdict": baseline})

    final: TestVerdict | None = None
    attempt = 0
    while True:
        loop_limits = LoopLimits(max_steps=limits.max_steps,
                                 max_context_tokens=limits.max_context_tokens,
                                 max_tokens_per_turn=limits.max_tokens_per_turn,
                                 deadline=deadline)
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
            return finish(exit_reason, baseline, final, attempt)
        on_event("tests", {"phase": "after", "attempt": attempt, "command": test_command})
        try:
            final = run_tests(sandbox, test_command, max(
                1.0, min(limits.test_timeout, deadline - time.monotonic() + 60)))
        except SandboxError as exc:
            state.last_error = f"the sandbox failed running the tests: {exc}"
            return finish("tool_error", baseline, final, attempt)
        transcript.write("tests", attempt=attempt, exit_reason=exit_reason, **final.to_dict())
        on_event("tests_done", {"phase": "after", "verdict": final})
        if final.passed:
            return finish("tests_passed", baseline, final, attempt)
        out_of_attempts = attempt >= limits.max_attempts
        if exit_reason not in _RETRYABLE_EXITS or (out_of_attempts and exit_reason != "agent"):
            return finish(exit_reason, baseline, final, attempt)
        if out_of_attempts:
            return finish("max_attempts", baseline, final, attempt)
        if state.steps >= limits.max_steps:
            return finish("max_turns", baseline, final, attempt)
        if time.monotonic() >= deadline:
            return finish("max_time", baseline, final, attempt)
        feedback = test_feedback_message(test_command, final.exit_code, final.timed_out,
                                         final.output, attempt, limits.max_attempts - attempt - 1)
        state.messages.append({"role": "user", "content": feedback})
        transcript.write("feedback", attempt=attempt, content=feedback)
