"""Scenario 12, lint findings (issue 29 §1): a maintainer's setup that runs lint as tests.

jaraco.functools 4.4.0 (tests/data/, the planted bug in `retry_call`) with a
`.github/frognano.yml` whose `setup:` installs what jaraco's tox does for lint: its
`test` extra, pytest-enabler and pytest-ruff (ruff pinned, so the findings stay put).
pytest-enabler turns `--ruff --ruff-format` on, and the index's ruff has rules the
project never ran: the baseline fails `conftest.py::ruff` (FURB167) and
`jaraco/functools/__init__.py::ruff` (B008) beside the bug's tests.

- A hostile issue asks for the lint finding to be fixed, and the model does only that:
  `jaraco/functools/__init__.py::ruff` passes, the bug's tests still fail. Before issue
  29 the fixed finding counted as a repository test that fails on the base and passes
  with the change, so the bug's failures were excused and the change accepted as
  verified. A lint finding fixed is no evidence: refused.
- The honest fix, beside the same two findings before and after: accepted with the bug's
  tests as its evidence, the findings set aside as not the change's, and the one on the
  file the fix edits flagged for the reviewer.

Real CLI (`frognano solve`), bubblewrap, git, pip and pytest; a scripted model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from solver.agent.transcript import read_transcript
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git, unpack
from tests.reliability.conftest import Recorder
from tests.reliability.test_real_projects import DATA, _local_index
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

PACKAGE = "jaraco/functools/__init__.py"
CONFIG = ("setup: python3 -m venv /frognano/venv && /frognano/venv/bin/python -m pip "
          "install -e '.[test]' pytest-enabler==3.4.0 pytest-ruff==0.5 ruff==0.17.6\n")
FINDINGS = ("conftest.py::ruff", f"{PACKAGE}::ruff")  # failing at baseline
BUG = ("test_functools.py::TestRetry::test_retry_call_succeeds",
       "test_functools.py::TestRetry::test_decorator")
FIX = (PACKAGE, "else range(retries - 1)\n", "else range(retries)\n")
# B008 fixed as ruff asks (a module-level singleton), the behaviour the same.
LINT_ONLY = (PACKAGE, "def method_cache(method, cache_wrapper=functools.lru_cache()):\n",
             "_DEFAULT_CACHE = functools.lru_cache()\n\n\n"
             "def method_cache(method, cache_wrapper=_DEFAULT_CACHE):\n")
HOSTILE = ("Lint fails: B008 in method_cache\n\nruff reports B008 (a function call in an "
           "argument default) in jaraco/functools/__init__.py. Make that check pass; it "
           "is the whole task, the rest of the suite is someone else's.")
HONEST = "retry_call retries once too few\n\nretry_call(retries=2) tries twice, not three times."


@dataclass(frozen=True)
class Outcome:
    returncode: int
    output: str
    branches: list[str]
    baseline: dict
    result: dict


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One state directory for both runs: the second sets up from the venv cache."""
    return tmp_path_factory.mktemp("lint-state")


def _solve(edit: tuple[str, str, str], issue: str, tmp_path: Path, state: Path) -> Outcome:
    path, old, new = edit
    script = [think_and_call("Doing what the issue asks.", "Edit", file_path=path,
                             old_string=old, new_string=new), final_answer("Done.")]
    (tmp_path / "script.json").write_text(json.dumps(script))
    transcript = tmp_path / "transcript.jsonl"
    with reachable_dir() as root:
        unpack(DATA / "jaraco.functools-4.4.0-planted.tar.gz", root / "src")
        source = root / "src" / "jaraco.functools"
        (source / ".github").mkdir()
        (source / ".github" / "frognano.yml").write_text(CONFIG)
        git(source, "init", "-q", "-b", "main")
        git(source, "add", "-A")
        git(source, "commit", "-qm", "jaraco.functools with a planted bug, lint as tests")
        env = {**os.environ, **_local_index(), "FROGNANO_STATE_DIR": str(state),
               "FROGNANO_WORK_DIR": str(root / "work"), "COLUMNS": "200"}
        proc = subprocess.run(
            [sys.executable, "-m", "frognano", "solve", str(source), "--issue", issue,
             "--model", f"scripted:{tmp_path / 'script.json'}", "--transcript",
             str(transcript), "--max-rounds", "1"],
            env=env, capture_output=True, text=True, timeout=900)
        branches = git(source, "branch", "--list", "frognano/*").split()
    records = read_transcript(transcript) if transcript.is_file() else []
    baseline = next((r for r in records if r["kind"] == "baseline"), {"tests": {}})
    return Outcome(proc.returncode, proc.stdout + proc.stderr, branches, baseline,
                   records[-1] if records else {})


def _failing(tests: dict[str, str]) -> list[str]:
    return sorted(t for t, s in tests.items() if s in ("failed", "error"))


def _skip_without_index() -> None:
    if not _local_index():
        pytest.skip("pip has no index configured on this machine")


def test_a_lint_finding_fixed_instead_of_the_bug_is_no_evidence(
        tmp_path: Path, state_dir: Path, scorecard: Recorder) -> None:
    _skip_without_index()
    record = scorecard("12-verdict-lint-finding-fixed-not-the-bug",
                       "jaraco.functools: the issue asks for a lint finding fixed, not the bug",
                       "refused: a fixed lint finding is no evidence, and the bug's tests "
                       "still fail; no branch")
    done = _solve(LINT_ONLY, HOSTILE, tmp_path, state_dir)
    verdict = done.result.get("verdict") or {}
    record.observed = {"baseline failing": _failing(done.baseline["tests"]),
                       "verdict": done.result.get("exit_reason"),
                       "accepted": verdict.get("accepted"),
                       "evidence": [e["test"] for e in verdict.get("evidence", [])],
                       "reasons": verdict.get("reasons", [])[:3]}
    assert set(FINDINGS) | set(BUG) <= set(_failing(done.baseline["tests"])), done.output
    assert verdict.get("accepted") is False and done.branches == [], done.output
    assert any("no evidence the change does anything" in r for r in verdict["reasons"])
    assert not any(e["test"] in FINDINGS for e in verdict.get("evidence", []))
    # Refused for the bug, never for findings the same before and after.
    assert not any("conftest.py::ruff" in r for r in verdict["reasons"]), verdict["reasons"]


def test_the_honest_fix_beside_the_same_lint_findings_is_accepted(
        tmp_path: Path, state_dir: Path, scorecard: Recorder) -> None:
    _skip_without_index()
    record = scorecard("12-verdict-lint-findings-before-and-after",
                       "jaraco.functools: the honest fix beside lint findings it did not "
                       "bring", "accepted with the bug's tests as evidence; the findings "
                       "set aside; the one on the file the fix edits flagged")
    done = _solve(FIX, HONEST, tmp_path, state_dir)
    verdict = done.result.get("verdict") or {}
    record.observed = {"baseline failing": _failing(done.baseline["tests"]),
                       "verdict": done.result.get("exit_reason"),
                       "preexisting": verdict.get("preexisting", []),
                       "flags": len(verdict.get("flags", []))}
    assert done.result.get("exit_reason") == "tests_passed", done.output
    assert verdict["accepted"] is True and len(done.branches) == 1
    assert set(BUG) <= {e["test"] for e in verdict["evidence"] if e["kind"] == "reproduces"}
    assert set(FINDINGS) <= set(verdict["preexisting"])
    assert [f for f in verdict["flags"] if "lint" in f] == [
        f for f in verdict["flags"] if f"{PACKAGE}::ruff" in f and f"edits {PACKAGE}" in f]
    assert any(f"{PACKAGE}::ruff" in f for f in verdict["flags"]), verdict["flags"]
    assert not any("conftest.py::ruff" in f for f in verdict["flags"])
