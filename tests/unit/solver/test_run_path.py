"""The shared run path (solver/run_path.py): the decision as data, the plan from config
and flags, and the runner's own word on whether a tool call failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import SandboxConfig, open_sandbox
from solver.agent.result import SolveLimits, SolveResult
from solver.hostgit import Snapshot
from solver.models.base import Usage
from solver.repo_config import parse_repo_config
from solver.run_path import NO_CHANGE, NoTestCommand, Overrides, decide, prepare
from tests.support.sandbox_support import BACKENDS, reachable_dir


def result(*, passed: bool = True, paths: list[str] | None = None, too_large: bool = False,
           snapshot: bool = True, links: dict[str, str] | None = None,
           exit_reason: str = "tests_passed", error: str = "") -> SolveResult:
    shot = Snapshot(base="b" * 40, tree="t" * 40, diff="", paths=paths or [],
                    too_large=too_large, links=links or {}) if snapshot else None
    return SolveResult(exit_reason=exit_reason, tests_passed=passed, diff="",
                       test_command="pytest", baseline=None, final=None, attempts=1, steps=1,
                       usage=Usage(), seconds=1.0, snapshot=shot, error=error)


DEFAULT = parse_repo_config(None)


@pytest.mark.parametrize(("run", "config", "expected"), [
    (result(paths=["calc.py"]), DEFAULT, ("publish", "pr_opened", "")),
    (result(passed=False, exit_reason="max_attempts", paths=["calc.py"]), DEFAULT,
     ("fail", "failed", "`max_attempts`")),
    (result(snapshot=False, error="git died"), DEFAULT,
     ("fail", "failed", "the change could not be read: git died")),
    (result(paths=["big.bin"], too_large=True), DEFAULT, ("refuse", "refused_size", None)),
    (result(paths=[]), DEFAULT, ("fail", "no_change", NO_CHANGE)),
    (result(paths=["calc.py", ".github/workflows/ci.yml"]), DEFAULT,
     ("refuse", "refused_paths", None)),
    (result(paths=["docs/a.md"]), parse_repo_config("protected_paths: ['docs/**']\n"),
     ("refuse", "refused_paths", None)),
    (result(paths=["hub"], links={"hub": ".github/workflows"}), DEFAULT,
     ("refuse", "refused_paths", None)),
])
def test_decide(run: SolveResult, config: object, expected: tuple[str, str, str | None]
                ) -> None:
    decision = decide(run, config)  # type: ignore[arg-type]
    action, outcome, reason = expected
    assert (decision.action, decision.outcome) == (action, outcome)
    if reason is not None:
        assert decision.reason == reason
    if outcome == "refused_size":
        assert "larger than the limit" in decision.reason
    if outcome == "refused_paths":
        assert decision.paths and "never push" in decision.reason
        assert decision.paths[0] in decision.reason


def test_a_failed_run_is_never_published_whatever_its_snapshot() -> None:
    """The verdict comes first: a refused change with a clean snapshot still fails."""
    assert decide(result(passed=False, paths=["calc.py"]), DEFAULT).action == "fail"


def test_prepare_takes_flags_over_config_over_detection(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\nversion = '0'\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    config = parse_repo_config("test: make check\nmax_steps: 7\ntimeout_minutes: 30\n"
                               "setup: make deps\n")
    plan = prepare("fix it", tmp_path, config, max_run_seconds=600, context_tokens=4096)
    assert plan.test_command == "make check" and plan.setup_command == "make deps"
    assert plan.limits == SolveLimits(max_steps=7, max_attempts=3, max_seconds=600,
                                      max_context_tokens=4096, test_timeout=900)
    flags = Overrides(test_command="pytest -x", max_steps=3, timeout_minutes=5)
    plan = prepare("fix it", tmp_path, config, overrides=flags)
    assert plan.test_command == "pytest -x" and plan.limits.max_steps == 3
    assert plan.limits.max_seconds == 300
    detected = prepare("fix it", tmp_path, DEFAULT, guidance="keep it short")
    assert "pytest" in detected.test_command and detected.guidance == "keep it short"
    assert detected.setup_command and detected.setup_note, "a Python project gets a venv"


def test_prepare_without_any_test_command(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("docs only\n")
    with pytest.raises(NoTestCommand):
        prepare("fix it", tmp_path, DEFAULT)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_runner_says_which_calls_failed(backend: str) -> None:
    """Read of a missing file and an unknown tool failed; a Bash command that exits 1 did
    not (its exit code is its output), and neither did a Glob whose match reads like an
    exception, which a pattern on the text would have counted as one."""
    with reachable_dir() as root:
        (root / "ws").mkdir()
        (root / "ws" / "KeyError: not really.txt").write_text("x")
        config = SandboxConfig(workspace=root / "ws", private_dir=root / "private")
        (root / "private").mkdir()
        with open_sandbox(backend, config) as sandbox:
            missing = sandbox.call_tool("Read", {"file_path": "nope.py"})
            unknown = sandbox.call_tool("Delete", {})
            exit_one = sandbox.call_tool("Bash", {"command": "exit 1"})
            glob = sandbox.call_tool("Glob", {"pattern": "*.txt"})
    assert missing.error and missing.output.startswith("FileNotFoundError")
    assert unknown.error and unknown.output == "Unknown tool: Delete"
    assert not exit_one.error and exit_one.output.startswith("Exit code: 1")
    assert not glob.error and glob.output.startswith("KeyError: not really.txt")
