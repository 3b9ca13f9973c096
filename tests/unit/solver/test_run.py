"""The run (solver/run.py): the decision as data, the plan from config and flags, a
crashed candidate ending the run, and the runner's own word on whether a tool call failed."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from sandbox import SandboxConfig, open_sandbox
from solver.agent.result import SolveResult
from solver.agent.run_events import Triggered
from solver.defaults import RunDefaults
from solver.hostgit import GitError, HostRepo, Snapshot
from solver.limits import Limits
from solver.models.base import ModelClient, Usage
from solver.models.scripted import ScriptedModel, final_answer, think_and_call
from solver.repo_config import parse_repo_config
from solver.run import (
    NO_CHANGE,
    NoTestCommand,
    RunRequest,
    Workspace,
    decide,
    ends_search,
    prepare,
    run,
)
from tests.conftest import make_repo
from tests.reliability.stack import FIX_CALC
from tests.support.sandbox_support import BACKENDS, HAVE_BWRAP, reachable_dir


def result(*, passed: bool = True, paths: list[str] | None = None, too_large: bool = False,
           snapshot: bool = True, links: dict[str, str] | None = None,
           exit_reason: str = "tests_passed", error: str = "") -> SolveResult:
    shot = Snapshot(base="b" * 40, tree="t" * 40, diff="", paths=paths or [],
                    too_large=too_large, links=links or {}) if snapshot else None
    return SolveResult(exit_reason=exit_reason, tests_passed=passed, diff="",
                       test_command="pytest", baseline=None, final=None, rounds=1, steps=1,
                       usage=Usage(), seconds=1.0, snapshot=shot, error=error)


DEFAULT = parse_repo_config(None)


@pytest.mark.parametrize(("run", "config", "expected"), [
    (result(paths=["calc.py"]), DEFAULT, ("publish", "pr_opened", "")),
    (result(passed=False, exit_reason="max_rounds", paths=["calc.py"]), DEFAULT,
     ("fail", "failed", "`max_rounds`")),
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


def _with_evidence(*kinds: str) -> SolveResult:
    from solver.verdict.evidence import MODEL, TestEvidence
    from solver.verdict.verdict import Verdict

    run = result(paths=["calc.py", "test_calc.py"])
    run.verdict = Verdict(accepted=True, evidence=[
        TestEvidence(f"test_calc.py::test_{i}", kind, MODEL, "passed")
        for i, kind in enumerate(kinds)])
    return run


def test_evidence_required_refuses_what_no_test_shows_and_flag_publishes_it() -> None:
    """`evidence: required`: no test fails without the change, no PR; `flag` (the
    default) publishes it, and the decision says it is unverified."""
    required = parse_repo_config("evidence: required\n")
    shows_nothing = _with_evidence("passes_on_base", "new_feature")
    refused = decide(shows_nothing, required)
    assert (refused.action, refused.outcome) == ("refuse", "refused_unverified")
    assert refused.reason.startswith("no test fails without this change: ")
    assert "test_calc.py::test_0 passes on the base code too" in refused.reason
    assert "test_calc.py::test_1 fails on the base code only for a name the change adds" \
        in refused.reason
    flagged = decide(shows_nothing, DEFAULT)
    assert (flagged.action, flagged.verified) == ("publish", False)
    assert "no test fails without this change" in decide(result(paths=["calc.py"]),
                                                        required).reason
    for config in (DEFAULT, required):
        verified = decide(_with_evidence("passes_on_base", "reproduces"), config)
        assert (verified.action, verified.verified) == ("publish", True)


def test_only_a_verified_pass_skips_the_candidates_not_yet_started() -> None:
    """Best of N in turn: an unverified pass may lose to a later candidate's evidence, so
    it does not end the search; a verified one does, a refusal or failure never."""
    assert ends_search(decide(_with_evidence("passes_on_base", "reproduces"), DEFAULT))
    assert not ends_search(decide(_with_evidence("passes_on_base", "new_feature"), DEFAULT))
    required = parse_repo_config("evidence: required\n")
    assert not ends_search(decide(_with_evidence("passes_on_base"), required))


def test_a_failed_run_is_never_published_whatever_its_snapshot() -> None:
    """The verdict comes first: a refused change with a clean snapshot still fails."""
    assert decide(result(passed=False, paths=["calc.py"]), DEFAULT).action == "fail"


def test_prepare_takes_flags_over_config_over_detection(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\nversion = '0'\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    config = parse_repo_config("test: make check\nmax_steps: 7\ntimeout_minutes: 30\n"
                               "setup: make deps\n")
    plan = prepare("fix it", tmp_path, config, max_run_seconds=600,
                   limits=Limits(max_context_tokens=4096))
    assert plan.test_command == "make check" and plan.setup_command == "make deps"
    assert plan.limits == Limits(max_steps=7, max_rounds=3, max_seconds=600,
                                 max_context_tokens=4096, test_timeout=900)
    flags = Limits(max_steps=3, max_seconds=5 * 60)  # --max-steps 3 --timeout-minutes 5
    plan = prepare("fix it", tmp_path, config, test_command="pytest -x", flags=flags)
    assert plan.test_command == "pytest -x" and plan.limits.max_steps == 3
    assert plan.limits.max_seconds == 300
    detected = prepare("fix it", tmp_path, DEFAULT, guidance="keep it short")
    assert "pytest" in detected.test_command and detected.guidance == "keep it short"
    assert detected.setup_command and detected.setup_note, "a Python project gets a venv"


def test_prepare_without_any_test_command(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("docs only\n")
    with pytest.raises(NoTestCommand):
        prepare("fix it", tmp_path, DEFAULT)


@pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")
def test_a_crashed_candidate_stops_the_others_and_is_the_runs(tmp_path: Path) -> None:
    """Candidate 2's workspace cannot be made (the mirror is gone): the run fails with that
    error, as a single run would, and candidate 1, running beside it in a real sandbox,
    stops at its next step instead of running on unobserved."""
    source = make_repo(tmp_path / "calc", template="calc_repo")
    started = threading.Event()

    class MirrorGone(Workspace):
        def open(self, candidate: int, defaults: RunDefaults) -> HostRepo:
            if candidate == 0:
                return super().open(candidate, defaults)
            started.wait(60)  # candidate 1 is under way first
            raise GitError("the mirror is gone")

    def model_for(seed: int | None) -> ModelClient:
        step = think_and_call("Look.", "Bash", command="sleep 2")
        return ScriptedModel([lambda _: (started.set(), step)[1], FIX_CALC,
                              final_answer("Fixed.")], seed=seed)

    with reachable_dir() as root, pytest.raises(GitError, match="the mirror is gone"):
        run(RunRequest(issue="add() subtracts", config=DEFAULT, candidates=2,
                       defaults=RunDefaults(model_for=model_for, max_candidates=2,
                                            model_slots=2),
                       workspace=MirrorGone(source=source, run_dir=root / "run"),
                       transcript_for=lambda k: tmp_path / f"{k}.jsonl",
                       opening=Triggered(trigger={}, generation=1)))
    first = [json.loads(line) for line in (tmp_path / "0.jsonl").read_text().splitlines()]
    result = next(r for r in first if r["kind"] == "result")
    assert result["exit_reason"] == "cancelled" and "return a + b" not in result["diff"]


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
