"""Builders for a run's typed events (solver/agent/run_events.py), for tests that feed the
run recorder or an output directly instead of running a model."""

from __future__ import annotations

from typing import Any

from solver.agent.result import SolveResult
from solver.agent.run_events import Observation, RunFinished, RunStarted, TurnDone
from solver.models.base import ToolCall, Turn, Usage
from solver.verdict.repo_tests import TestVerdict, compare_results
from solver.verdict.verdict import Verdict


def started(model: str = "scripted", test_command: str = "pytest -q") -> RunStarted:
    return RunStarted(model=model, test_command=test_command, setup_command=None,
                      setup_note="", limits={"max_steps": 100}, sampling=None, seed=None,
                      task="the issue")


def ran_tests(tests: dict[str, str], *, passed: bool, seconds: float = 0.4,
              output: str = "", command: str = "pytest -q") -> TestVerdict:
    return TestVerdict(command=command, exit_code=0 if passed else 1, timed_out=False,
                       seconds=seconds, output=output, tests=tests, report="junit")


def turn(step: int, *, content: str = "", reasoning: str = "",
         calls: list[tuple[str, dict[str, Any], Observation]] | None = None,
         prompt_tokens: int = 0, evaluated: int = 0, completion_tokens: int = 0,
         model_seconds: float = 0.1, round_index: int = 0) -> TurnDone:
    """One turn; `calls` are (tool, arguments, what it gave)."""
    calls = calls or []
    usage = Usage(prompt_tokens=prompt_tokens, prompt_tokens_evaluated=evaluated,
                  completion_tokens=completion_tokens)
    tool_calls = [ToolCall(o.call_id, name, args) for name, args, o in calls]
    answer = Turn(content=content, reasoning=reasoning, tool_calls=tool_calls, usage=usage,
                  finish_reason="tool_calls" if calls else "stop")
    return TurnDone(step=step, round=round_index, turn=answer,
                    observations=[o for _, _, o in calls], model_seconds=model_seconds)


def finished(baseline: TestVerdict, final: TestVerdict, *, diff: str = "",
             steps: int = 1, seconds: float = 1.0, usage: Usage | None = None,
             exit_reason: str = "tests_passed") -> RunFinished:
    accepted = exit_reason == "tests_passed"
    return RunFinished(result=SolveResult(
        exit_reason=exit_reason, tests_passed=accepted, diff=diff,
        test_command=final.command, baseline=baseline, final=final, rounds=1,
        steps=steps, usage=usage or Usage(), seconds=seconds,
        changes=compare_results(baseline.tests, final.tests),
        verdict=Verdict(accepted=accepted)))
