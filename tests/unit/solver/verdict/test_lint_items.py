"""Lint and type checks as test items (issue 29 §1): the same finding before and after is
not the change's, a new one is, and a fixed one is no evidence.

The ids are those real runs of pytest-ruff 0.5, pytest-mypy 1.1, pytest-checkdocs 2.14,
pytest-flake8 1.3 and pytest-isort 4.0 report on jaraco.functools 4.4.0, read back as
junit_report.py rebuilds them (`jaraco.functools.__init__.pyi::mypy` is a stub's)."""

from __future__ import annotations

import pytest

from solver.verdict.evidence import reproducing
from solver.verdict.lint_items import checked_files, is_lint_item
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.suite_paths import TreePlan
from solver.verdict.verdict import Reruns, decide, needs_second_baseline

RUFF = "jaraco/functools/__init__.py::ruff"
CONF = "conftest.py::ruff"
DOCS = ".::project"
BUG = "test_functools.py::TestRetry::test_decorator"
OK = "test_functools.py::TestRetry::test_with_arg"


def run(tests: dict[str, str], failures: dict[str, str] | None = None) -> TestVerdict:
    bad = any(s in ("failed", "error") for s in tests.values())
    return TestVerdict(command="t", exit_code=1 if bad else 0, timed_out=False,
                       seconds=1.0, output="", tests=tests, report="junit",
                       failures=failures or {})


FINDING = {RUFF: "pytest_ruff.RuffError: B008 Do not perform function call "
                 "`functools.lru_cache` in argument defaults --> "
                 "jaraco/functools/__init__.py:90:40"}
# The base: the planted bug fails its test; the index's ruff finds B008 and FURB167 the
# project never ran; checkdocs cannot build the project without network.
BASE = run({RUFF: "failed", CONF: "failed", DOCS: "failed", BUG: "failed", OK: "passed"},
           FINDING)


@pytest.mark.parametrize("test", [
    RUFF, "jaraco/functools/__init__.py::ruff::format", "test_functools.py::mypy",
    "jaraco.functools.__init__.pyi::mypy", "conftest.py::mypy-status", DOCS,
    "pkg/mod.py::flake-8::FLAKE8", "pkg/mod.py::FLAKE8", "pkg/mod.py::black",
    "pkg/mod.py::ISORT", "pkg/mod.py::PYLINT", "pkg/mod.py::PYCODESTYLE"])
def test_the_lint_plugins_items_are_known_by_their_ids(test: str) -> None:
    assert is_lint_item(test)


@pytest.mark.parametrize("test", [
    BUG, "tests/test_ruff.py::test_ruff", "tests/test_x.py::TestMypy::test_mypy",
    "tests/test_x.py::test_project", "docs/index.rst::index.rst", "src/ruff.py"])
def test_a_test_about_a_linter_is_a_test(test: str) -> None:
    assert not is_lint_item(test)


def test_the_file_a_lint_item_checks() -> None:
    assert checked_files(RUFF) == {"jaraco/functools/__init__.py"}
    assert "jaraco/functools/__init__.pyi" in checked_files(
        "jaraco.functools.__init__.pyi::mypy")
    assert "pyproject.toml" in checked_files(DOCS)


def test_the_same_lint_finding_before_and_after_is_not_the_changes() -> None:
    # The honest fix with no test of its own (say the test is not in the suite):
    # before issue 29 the lint failures were excused only with evidence, so it was refused.
    base = run({**BASE.tests, BUG: "passed"}, FINDING)
    final = run({**base.tests}, FINDING)
    assert needs_second_baseline(base, final)
    result = decide(base, final, TreePlan(), reruns=Reruns(second=base))
    assert result.accepted, result.reasons
    assert result.preexisting == [DOCS, CONF, RUFF] and not result.verified
    assert any(RUFF in note and "not the change's" in note for note in result.notes)
    assert result.flags == []  # the change edits none of the checked files


def test_the_fix_with_evidence_is_accepted_with_the_same_findings() -> None:
    final = run({**BASE.tests, BUG: "passed"}, FINDING)
    result = decide(BASE, final, TreePlan(), reruns=Reruns(second=BASE))
    assert result.accepted, result.reasons
    assert reproducing(result.evidence) == [BUG]


def test_a_lint_item_on_a_file_the_change_edits_is_flagged_for_the_reviewer() -> None:
    final = run({**BASE.tests, BUG: "passed"},
                {RUFF: FINDING[RUFF].replace(":90:40", ":91:40")})  # a line moved it
    result = decide(BASE, final, TreePlan(),
                    reruns=Reruns(second=BASE, edited=("jaraco/functools/__init__.py",)))
    assert result.accepted, result.reasons
    [flag] = result.flags
    assert RUFF in flag and "edits jaraco/functools/__init__.py" in flag
    assert "first finding reads the same" in flag
    other = run({**final.tests}, {RUFF: "pytest_ruff.RuffError: E501 Line too long"})
    [flag] = decide(BASE, other, TreePlan(), reruns=Reruns(
        second=BASE, edited=("jaraco/functools/__init__.py",))).flags
    assert "reads differently" in flag


def test_a_new_lint_finding_is_the_changes() -> None:
    base = run({**BASE.tests, RUFF: "passed"})
    final = run({**BASE.tests, BUG: "passed"})
    result = decide(base, final, TreePlan(), reruns=Reruns(second=base))
    assert not result.accepted
    assert f"test fails: {RUFF} (a lint or type check that passed on the base: the " \
           "change's own finding)" in result.reasons


def test_a_lint_finding_fixed_is_no_evidence() -> None:
    # The change fixes B008 and not the bug: the test still fails.
    final = run({**BASE.tests, RUFF: "passed"})
    result = decide(BASE, final, TreePlan(), reruns=Reruns(second=BASE))
    assert not result.accepted and reproducing(result.evidence) == []
    assert any("no evidence the change does anything" in r and RUFF not in r
               for r in result.reasons), result.reasons


def test_a_lint_item_failing_in_one_baseline_run_only_is_flaky() -> None:
    second = run({**BASE.tests, DOCS: "passed"}, FINDING)
    final = run({**BASE.tests, BUG: "passed"}, FINDING)
    result = decide(BASE, final, TreePlan(), reruns=Reruns(second=second))
    assert result.accepted and result.flaky == [DOCS], result.reasons


def test_the_trace_of_what_a_test_runs_never_blames_a_lint_item() -> None:
    # A checker reads the file and runs none of it: whatever the trace met is no measure.
    from solver.verdict.touched import Touched

    final = run({**BASE.tests, BUG: "passed"}, FINDING)
    touched = Touched(tests=frozenset({RUFF, CONF}))
    result = decide(BASE, final, TreePlan(), reruns=Reruns(second=BASE, touched=touched))
    assert result.accepted and RUFF in result.preexisting, result.reasons


def test_a_refusal_for_want_of_evidence_never_blames_the_lint_findings() -> None:
    final = run({**BASE.tests, RUFF: "passed"}, FINDING)  # the lint-only change
    reasons = decide(BASE, final, TreePlan(), reruns=Reruns(second=BASE)).reasons
    assert any(BUG in r for r in reasons) and not any(CONF in r for r in reasons), reasons
