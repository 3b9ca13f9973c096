"""Scenario 29, issue 29 §1: a huge suite (100,000 tests) gets fast rounds, and a
baseline that alone exceeds the budget is said plainly, before the model.

A project generated here: 200 test files of 500 parametrized trivial tests each, and one
planted bug in `clamp`, which 2 tests cover (a third test of it passes). Through
`frognano solve` (the real CLI, bubblewrap, git and pytest, no config) a scripted model
first makes a wrong fix that breaks the passing test: the fast round (the failing tests'
file, and the test files importing the changed module) sends it back without a run of
the whole suite. Its honest fix then passes the fast round, and the whole suite runs
once for the verdict, which accepts it. The row records the baseline's, each round's and
the verdict's seconds. The same project with a test timeout of a few seconds stops at
the baseline, with how long it ran and how far it got, and the model never starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solver.agent.transcript import read_transcript
from solver.models.scripted import final_answer, think_and_call, think_and_calls
from tests.conftest import git
from tests.reliability.conftest import Recorder
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]
FILES, PER_FILE = 200, 500  # 100,000 generated tests, and the three of clamp
CLAMP = "hugepkg/mathy.py"
BUGGY = "    return min(high, value)\n"
WRONG = "    return max(low, value)\n"  # fixes the low cases, breaks the high one
HONEST = "    return max(low, min(high, value))\n"
FAILING = ["tests/test_mathy.py::test_clamp_low", "tests/test_mathy.py::test_clamp_negative"]
ISSUE = "clamp is wrong\n\nclamp(-1, 0, 3) returns -1; it should return 0."


# How the generated tests reach `double`: by a plain import, or by a name no import line
# shows (the fast round's lookup of importers cannot see it; the whole suite runs it).
PLAIN = "import pytest\n\nfrom hugepkg.strs import double\n"
HIDDEN = ("import importlib\n\nimport pytest\n\n"
          "double = importlib.import_module('hugepkg.' + 'strs').double\n")


def _project(source: Path, files: int, config: str = "", header: str = PLAIN) -> Path:
    """The generated project, committed: `files` × PER_FILE trivial tests, clamp's bug."""
    (source / "hugepkg").mkdir(parents=True)
    (source / "tests").mkdir()
    (source / "hugepkg" / "__init__.py").write_text("")
    (source / CLAMP).write_text(f"def clamp(value, low, high):\n{BUGGY}")
    (source / "hugepkg" / "strs.py").write_text("def double(text):\n    return text * 2\n")
    (source / "tests" / "test_mathy.py").write_text(
        "from hugepkg.mathy import clamp\n\n\ndef test_clamp_low():\n"
        "    assert clamp(-1, 0, 3) == 0\n\n\ndef test_clamp_negative():\n"
        "    assert clamp(-5, -2, 3) == -2\n\n\ndef test_clamp_high():\n"
        "    assert clamp(5, 0, 3) == 3\n")
    for index in range(files):
        (source / "tests" / f"test_gen_{index:03d}.py").write_text(
            f"{header}\n\n@pytest.mark.parametrize('n', range({PER_FILE}))\n"
            "def test_trivial(n):\n    assert double(str(n)) == str(n) * 2\n")
    if config:
        (source / ".github").mkdir()
        (source / ".github" / "frognano.yml").write_text(config)
    git(source, "init", "-q", "-b", "main")
    git(source, "add", "-A")
    git(source, "commit", "-qm", "a huge suite with a planted bug")
    return source


def _solve(source: Path, script: list[str], tmp_path: Path, root: Path, rounds: int = 3
           ) -> tuple[subprocess.CompletedProcess[str], list[dict], float]:
    script_file, transcript = tmp_path / "script.json", tmp_path / "transcript.jsonl"
    script_file.write_text(json.dumps(script))
    env = {**os.environ, "FROGNANO_STATE_DIR": str(tmp_path / "state"),
           "FROGNANO_WORK_DIR": str(root / "work"), "COLUMNS": "200"}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "frognano", "solve", str(source), "--issue", ISSUE,
         "--model", f"scripted:{script_file}", "--transcript", str(transcript),
         "--max-rounds", str(rounds)], env=env, capture_output=True, text=True, timeout=3600)
    return proc, list(read_transcript(transcript)), time.monotonic() - started


def _count(record: dict) -> int:
    """The tests a run's record holds: a huge suite's record keeps only those that did not
    pass, and says how many it had (solver/agent/transcript.py)."""
    return record.get("thinned", {}).get("tests", len(record["tests"]))


def _edit(old: str, new: str) -> str:
    return think_and_call("clamp is wrong here.", "Edit", file_path=CLAMP, old_string=old,
                          new_string=new)


def test_a_huge_suite_gets_fast_rounds_and_one_whole_run_for_the_verdict(
        tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard("29-huge-suite-fast-rounds",
                       "A huge suite (100,000 generated tests): fast rounds",
                       "between rounds only the failing tests' file and the importers of the "
                       "changed module run; the whole suite once, for the verdict, which "
                       "accepts the honest fix")
    with reachable_dir() as root:
        source = _project(root / "src" / "huge", FILES)
        proc, records, seconds = _solve(
            source, [_edit(BUGGY, WRONG), final_answer("clamp fixed."),
                     _edit(WRONG, HONEST), final_answer("clamp fixed both ways.")],
            tmp_path, root)
        branches = git(source, "branch", "--list", "frognano/*").split()
    output = proc.stdout + proc.stderr
    baseline = next(r for r in records if r["kind"] == "baseline")
    judged = [r for r in records if r["kind"] == "tests"]
    result = records[-1]
    record.observed.update({
        "baseline tests": _count(baseline), "baseline seconds": baseline["seconds"],
        "rounds": [{"round": r["round"], "seconds": r["seconds"], "tests": _count(r),
                    "fast": bool(r.get("fast_round")), "accepted": r["verdict"]["accepted"]}
                   for r in judged],
        "verdict": result.get("exit_reason"), "solve seconds": round(seconds, 1)})
    assert sorted(t for t, s in baseline["tests"].items() if s == "failed") == FAILING, output
    assert _count(baseline) == FILES * PER_FILE + 3
    # Round 1: the wrong fix, judged by its fast round alone (the file of the failing
    # tests; no generated file imports hugepkg.mathy), and sent back.
    fast, whole = judged[0], judged[-1]
    assert fast.get("fast_round") and fast["round"] == 1, judged
    assert set(fast["tests"]) == {*FAILING, "tests/test_mathy.py::test_clamp_high"}
    assert fast["verdict"]["reasons"] == ["test fails: tests/test_mathy.py::test_clamp_high"]
    assert "This round ran part of the suite" in next(
        r["content"] for r in records if r["kind"] == "feedback")
    # Round 2: the honest fix passes its fast round, then the whole suite judges it.
    assert whole["round"] == 2 and not whole.get("fast_round") and whole["verdict"]["accepted"]
    assert _count(whole) == FILES * PER_FILE + 3
    assert result["exit_reason"] == "tests_passed" and branches, output
    assert fast["seconds"] * 5 < whole["seconds"], (fast["seconds"], whole["seconds"])


def test_a_baseline_over_the_budget_is_said_with_its_figures_and_the_model_never_starts(
        tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard("29-huge-suite-baseline-over-budget",
                       "A huge suite whose baseline alone exceeds the test timeout",
                       "the run stops before the model, saying how long the baseline ran "
                       "and how far it got")
    with reachable_dir() as root:
        source = _project(root / "src" / "huge", 40,
                          config="test_timeout_minutes: 0.1\n")
        proc, records, seconds = _solve(source, [_edit(BUGGY, HONEST),
                                                 final_answer("clamp fixed.")], tmp_path, root)
    output = proc.stdout + proc.stderr
    result = records[-1]
    record.observed.update({"exit": proc.returncode, "verdict": result.get("exit_reason"),
                            "error": result.get("error", "")[:300],
                            "solve seconds": round(seconds, 1)})
    assert proc.returncode == 2, output
    assert result["exit_reason"] == "baseline_unusable"
    error = result["error"]
    assert "the baseline alone exceeds the run's budget: the repository's tests ran " in error
    assert "stopped at the test timeout of 6 s" in error and "test_timeout_minutes:" in error
    assert "it had " in error or "how far it had got" in error
    assert not [r for r in records if r["kind"] in ("turn", "tests")]  # no model, no verdict


def test_a_change_that_passes_its_fast_round_is_still_judged_by_the_whole_suite(
        tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard("29-huge-suite-fast-round-is-no-verdict",
                       "Hostile: a fix that breaks tests its fast round does not run",
                       "the fast round passes (clamp fixed; the broken helper's tests reach "
                       "it by a name no import line shows), the whole suite refuses it")
    with reachable_dir() as root:
        # 11 files: 5,500 tests, past the threshold of fast rounds (solver/limits.py).
        source = _project(root / "src" / "huge", 11, header=HIDDEN)
        script = [think_and_calls("Fix clamp, and speed up double while here.", [
            ("Edit", {"file_path": CLAMP, "old_string": BUGGY, "new_string": HONEST}),
            ("Edit", {"file_path": "hugepkg/strs.py", "old_string": "text * 2",
                      "new_string": "text * 2 if text != '42' else text"})]),
            final_answer("clamp fixed.")]
        proc, records, seconds = _solve(source, script, tmp_path, root, rounds=2)
        branches = git(source, "branch", "--list", "frognano/*").split()
    output = proc.stdout + proc.stderr
    judged = [r for r in records if r["kind"] == "tests"]
    result = records[-1]
    record.observed.update({
        "rounds": [{"round": r["round"], "tests": _count(r),
                    "fast": bool(r.get("fast_round")), "accepted": r["verdict"]["accepted"]}
                   for r in judged],
        "verdict": result.get("exit_reason"), "solve seconds": round(seconds, 1)})
    assert not branches and not result["tests_passed"], output
    whole = judged[0]  # the fast round passed (no record): the whole suite judged round 1
    assert whole["round"] == 1 and not whole.get("fast_round"), judged
    assert _count(whole) == 11 * PER_FILE + 3
    assert "test fails: tests/test_gen_000.py::test_trivial[42]" in whole["verdict"]["reasons"]
