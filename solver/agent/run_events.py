"""What happens during a run, as typed records, and the outputs that listen to them.

The loop and the harness emit events; outputs decide what to make of them: the
transcript file writes the recorded ones as JSON lines (`record()`, the shapes the
transcript table in docs/TRANSCRIPT.md lists), the run recorder fills the run's columns, the
terminal shows a progress line, the worker edits the status comment. Nobody parses a
dict to learn what happened. Events with `kind = ""` are live only and never recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from sandbox.base import ExecResult
from solver.agent.result import SolveResult
from solver.models.base import ToolCall, Turn
from solver.service_report import ServiceLine
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.verdict import Verdict


@dataclass(frozen=True, kw_only=True)
class Event:
    kind: ClassVar[str] = ""  # the transcript record's kind; "" = not recorded
    at: float = field(default_factory=time.time)  # when it happened (the record's "time")

    def fields(self) -> dict[str, Any]:
        """The transcript record's fields, besides kind and time."""
        return {}

    def record(self) -> dict[str, Any] | None:
        if not self.kind:
            return None
        return {"kind": self.kind, "time": round(self.at, 3), **self.fields()}


class EventOutput(Protocol):
    def emit(self, event: Event) -> None: ...


class Outputs:
    """Hands every event to each output in turn."""

    def __init__(self, *outputs: EventOutput) -> None:
        self.outputs = outputs

    def emit(self, event: Event) -> None:
        for output in self.outputs:
            output.emit(event)


class OnEvent:
    """A plain function as an output."""

    def __init__(self, handle: Callable[[Event], None]) -> None:
        self.handle = handle

    def emit(self, event: Event) -> None:
        self.handle(event)


# --- the run ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Triggered(Event):
    """Which delivery and run number (`generation`) a bot run serves (workers only)."""

    kind: ClassVar[str] = "trigger"
    trigger: dict[str, Any]
    generation: int

    def fields(self) -> dict[str, Any]:
        return {"trigger": self.trigger, "generation": self.generation}


@dataclass(frozen=True, kw_only=True)
class RunStarted(Event):
    kind: ClassVar[str] = "run"
    model: str
    test_command: str
    setup_command: str | None
    setup_note: str
    limits: dict[str, Any]
    sampling: dict[str, Any] | None
    seed: int | None
    task: str
    services: tuple[ServiceLine, ...] = ()  # the test services its sandbox started

    def fields(self) -> dict[str, Any]:
        return {"model": self.model, "test_command": self.test_command,
                "setup_command": self.setup_command, "setup_note": self.setup_note,
                "limits": self.limits, "sampling": self.sampling, "seed": self.seed,
                "task": self.task, "services": [s.to_dict() for s in self.services]}


@dataclass(frozen=True, kw_only=True)
class SetupStarted(Event):
    command: str


@dataclass(frozen=True, kw_only=True)
class SetupDone(Event):
    kind: ClassVar[str] = "setup"
    command: str
    note: str
    result: ExecResult
    # Tracked files setup wrote (an editable install's `*.egg-info/`): setup's, never the
    # model's change: not refused, not pushed (HostRepo.snapshot leaves them out).
    writes: list[str] = field(default_factory=list)

    def fields(self) -> dict[str, Any]:
        result = self.result
        return {"command": self.command, "note": self.note, "exit_code": result.exit_code,
                "timed_out": result.timed_out, "seconds": round(result.seconds, 3),
                "output_tail": (result.stdout + result.stderr)[-4000:],
                "network": list(result.network_log),
                "writes": self.writes[:200], "writes_count": len(self.writes)}


@dataclass(frozen=True, kw_only=True)
class TestsStarted(Event):
    __test__ = False  # not a pytest test class
    phase: str  # "baseline" or "after"
    command: str
    round: int = 0


@dataclass(frozen=True, kw_only=True)
class BaselineDone(Event):
    kind: ClassVar[str] = "baseline"
    tests: TestVerdict

    def fields(self) -> dict[str, Any]:
        return self.tests.to_dict()


@dataclass(frozen=True, kw_only=True)
class TestsJudged(Event):
    """A verdict run after an agent round."""

    __test__ = False
    kind: ClassVar[str] = "tests"
    round: int
    exit_reason: str  # how the agent round ended
    tests: TestVerdict  # the repository's original tests on the candidate
    verdict: Verdict
    model_tests: TestVerdict | None
    # A huge suite's fast round (solver/verdict/huge_suite.py): the files it ran, and its
    # tests of the baseline's; None: the whole suite ran.
    fast_round: dict[str, Any] | None = None

    def fields(self) -> dict[str, Any]:
        return {"round": self.round, "exit_reason": self.exit_reason,
                **self.tests.to_dict(), "verdict": self.verdict.to_dict(),
                "model_tests": self.model_tests.to_dict() if self.model_tests else None,
                **({"fast_round": self.fast_round} if self.fast_round else {})}


@dataclass(frozen=True, kw_only=True)
class Feedback(Event):
    kind: ClassVar[str] = "feedback"
    round: int
    content: str

    def fields(self) -> dict[str, Any]:
        return {"round": self.round, "content": self.content}


@dataclass(frozen=True, kw_only=True)
class RunFinished(Event):
    kind: ClassVar[str] = "result"
    result: SolveResult

    def fields(self) -> dict[str, Any]:
        r = self.result
        return {"exit_reason": r.exit_reason, "tests_passed": r.tests_passed,
                "baseline": r.baseline.to_dict() if r.baseline else None,
                "final": r.final.to_dict() if r.final else None,
                "verdict": r.verdict.to_dict() if r.verdict else None,
                "changes": [c.__dict__ for c in r.changes], "suspicious": r.suspicious,
                "test_files_changed": r.test_files_changed, "diff": r.diff,
                "totals": r.totals(), "error": r.error,
                "services": [s.to_dict() for s in r.services]}


@dataclass(frozen=True, kw_only=True)
class RunAborted(Event):
    """The run could not start or the infrastructure failed outside the harness."""

    kind: ClassVar[str] = "result"
    exit_reason: str  # "bad_input" or "infrastructure_error"
    error: str

    def fields(self) -> dict[str, Any]:
        return {"exit_reason": self.exit_reason, "tests_passed": False, "error": self.error}


# --- the agent loop -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TurnStarted(Event):
    step: int
    round: int


@dataclass(frozen=True, kw_only=True)
class TurnTokens(Event):
    """Tokens generated so far in the current turn, as the backend streams them (live
    only: the turn's record has the count once it ends)."""

    step: int
    round: int
    tokens: int


@dataclass(frozen=True, kw_only=True)
class ToolStarted(Event):
    step: int
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Observation:
    """One tool call's outcome as the loop saw it."""

    call_id: str
    name: str
    output: str | None  # None: the sandbox failed during the call
    seconds: float
    failed: bool = False  # the runner said the call failed (unknown tool, the tool raised)
    sandbox_error: str | None = None

    @property
    def outcome(self) -> str:
        """For the tool statistics: ok, error (the tool failed) or sandbox_error."""
        return "sandbox_error" if self.sandbox_error is not None else \
            "error" if self.failed else "ok"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.call_id, "name": self.name, "output": self.output,
                                "seconds": round(self.seconds, 4), "failed": self.failed}
        if self.sandbox_error is not None:
            data["error"] = self.sandbox_error
        return data


def _call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments,
            "raw_arguments": call.raw_arguments}


@dataclass(frozen=True, kw_only=True)
class TurnDone(Event):
    kind: ClassVar[str] = "turn"
    step: int
    round: int
    turn: Turn
    observations: list[Observation]
    model_seconds: float

    @property
    def tool_seconds(self) -> float:
        return sum(o.seconds for o in self.observations)

    def fields(self) -> dict[str, Any]:
        turn = self.turn
        return {"step": self.step, "round": self.round,
                "assistant": {"content": turn.content, "reasoning": turn.reasoning,
                              "raw_text": turn.raw_text},
                "tool_calls": [_call(c) for c in turn.tool_calls],
                "parse_errors": turn.errors, "notes": turn.notes,
                "observations": [o.to_dict() for o in self.observations],
                "finish_reason": turn.finish_reason, "usage": turn.usage.to_dict(),
                "seconds": {"model": round(self.model_seconds, 4),
                            "tools": round(self.tool_seconds, 4)}}


@dataclass(frozen=True, kw_only=True)
class ModelFailed(Event):
    kind: ClassVar[str] = "error"
    step: int
    round: int
    reason: str  # the exit reason it causes
    error: str

    def fields(self) -> dict[str, Any]:
        return {"step": self.step, "round": self.round, "reason": self.reason,
                "error": self.error}
