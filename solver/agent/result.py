"""What a solve hands back (the harness and its outputs); its budgets are solver/limits.py's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from solver.hostgit import Snapshot
from solver.models.base import Usage
from solver.service_report import ServiceLine
from solver.verdict.repo_tests import TestChange, TestVerdict
from solver.verdict.verdict import Verdict


@dataclass
class SolveResult:
    # "tests_passed", a loop exit reason, "max_rounds", "setup_failed", "baseline_unusable"
    exit_reason: str
    tests_passed: bool  # the verdict accepted the change
    diff: str
    test_command: str
    baseline: TestVerdict | None
    final: TestVerdict | None
    rounds: int  # agent rounds, each ended by a verdict run (or by the run's end)
    steps: int
    usage: Usage
    seconds: float
    changes: list[TestChange] = field(default_factory=list)
    suspicious: list[str] = field(default_factory=list)
    test_files_changed: list[str] = field(default_factory=list)
    tool_calls: dict[str, int] = field(default_factory=dict)
    error: str = ""
    snapshot: Snapshot | None = None  # the host's view of the change (solver/hostgit.py)
    verdict: Verdict | None = None  # the last verdict (None: none was reached)
    with_model_tests: TestVerdict | None = None
    setup_command: str | None = None
    setup_note: str = ""  # how the setup command was chosen, when it was inferred
    summary: str = ""  # the model's last non-empty answer, for the PR body
    # The test services the run used (what started, or, when they did not, what was asked).
    services: list[ServiceLine] = field(default_factory=list)

    def totals(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "steps": self.steps,
            "seconds": round(self.seconds, 3),
            "usage": self.usage.to_dict(),
            "tool_calls": self.tool_calls,
        }
