"""Huge suites (issue 29 §1, solver/verdict/huge_suite.py): which test files a fast round
runs, when its failures send the model back before the whole suite, and what a baseline
over the budget says. Pure functions as data; the importers through real git."""

from __future__ import annotations

from pathlib import Path

import pytest

from solver.hostgit import HostRepo
from solver.limits import FAST_ROUNDS_MIN_SECONDS, FAST_ROUNDS_MIN_TESTS, fast_rounds
from solver.verdict.huge_suite import (
    Budget,
    Selection,
    file_of,
    importers,
    in_selection,
    module_names,
    not_ready,
    over_budget,
    reached,
    select,
)
from solver.verdict.repo_tests import TestVerdict
from tests.conftest import make_repo


def _run(tests: dict[str, str], *, report: str = "junit", timed_out: bool = False,
         output: str = "", seconds: float = 1.0) -> TestVerdict:
    return TestVerdict("python3 -m pytest", 1, timed_out, seconds, output, tests, report)


# A suite of three generated files (three tests each), the test file and a
# helper's: test_mathy's low case fails at baseline.
BASELINE = _run({
    **{f"tests/test_gen_{i}.py::test_trivial[{n}]": "passed" for i in range(3)
       for n in range(3)},
    "tests/test_mathy.py::test_clamp_low": "failed",
    "tests/test_mathy.py::test_clamp_high": "passed",
    "tests/test_strs.py::test_double": "passed",
    "tests/test_strs.py::TestUpper::test_upper": "passed",
})


@pytest.mark.parametrize(("path", "names"), [
    ("hugepkg/mathy.py", ["hugepkg.mathy"]),
    ("src/pkg/sub/mod.py", ["src.pkg.sub.mod", "pkg.sub.mod", "sub.mod"]),
    ("pkg/__init__.py", ["pkg"]),
    ("six.py", ["six"]),
    ("my-project/pkg/mod.py", ["pkg.mod"]),
    ("pkg/data.json", []),
])
def test_a_changed_file_is_imported_by_its_dotted_names(path: str, names: list[str]) -> None:
    assert module_names(path) == names


def test_the_selection_is_the_failing_tests_files_the_touched_ones_and_the_importers(
        ) -> None:
    changed = ["hugepkg/mathy.py", "tests/test_gen_2.py", "tests/new_test_file.py"]
    importing = {"tests/test_strs.py", "hugepkg/other.py"}  # not collected: left out
    selection = select(BASELINE, changed, importing)
    assert selection.files == ("tests/test_gen_2.py", "tests/test_mathy.py",
                               "tests/test_strs.py")
    assert (selection.tests, selection.of) == (3 + 2 + 2, 13)


def test_a_selection_is_a_round_of_its_own_only_when_it_saves_most_of_the_suite() -> None:
    assert Selection(("a.py",), 2, 13).worth
    assert not Selection(("a.py",), 7, 13).worth  # over half the suite: run it whole
    assert not Selection((), 0, 13).worth  # nothing to run


def test_the_fast_rounds_feedback_compares_with_the_baseline_of_its_files_only() -> None:
    part = in_selection(BASELINE, Selection(("tests/test_mathy.py",), 2, 13))
    assert part.tests == {"tests/test_mathy.py::test_clamp_low": "failed",
                          "tests/test_mathy.py::test_clamp_high": "passed"}
    assert file_of("tests/test_a.py::TestX::test_y[a::b]") == "tests/test_a.py"
    assert file_of("tests/test_a.py") is None


@pytest.mark.parametrize(("fast", "expected"), [
    # The test passes, nothing else broke: the whole suite runs for the verdict.
    ({"tests/test_mathy.py::test_clamp_low": "passed",
      "tests/test_mathy.py::test_clamp_high": "passed"}, []),
    # Every baseline failure still fails: back to the model.
    ({"tests/test_mathy.py::test_clamp_low": "failed",
      "tests/test_mathy.py::test_clamp_high": "passed"},
     ["test still fails: tests/test_mathy.py::test_clamp_low"]),
    # Fixed, but a test that passed at baseline errors now: back to the model.
    ({"tests/test_mathy.py::test_clamp_low": "passed",
      "tests/test_mathy.py::test_clamp_high": "error"},
     ["test errors: tests/test_mathy.py::test_clamp_high"]),
])
def test_a_fast_round_sends_the_model_back_only_on_what_the_verdict_would_refuse(
        fast: dict[str, str], expected: list[str]) -> None:
    assert not_ready(BASELINE, _run(fast)) == expected


def test_a_fast_round_that_tells_nothing_leaves_the_round_to_the_whole_suite() -> None:
    failing = {"tests/test_mathy.py::test_clamp_low": "failed"}
    assert not_ready(BASELINE, _run(failing, report="missing")) is None
    assert not_ready(BASELINE, _run(failing, timed_out=True)) is None
    assert not_ready(BASELINE, _run({})) is None


def test_the_test_modules_importing_a_changed_module_are_found_by_git(tmp_path: Path) -> None:
    source = make_repo(tmp_path / "src", {
        "hugepkg/__init__.py": "", "hugepkg/mathy.py": "def clamp(v, lo, hi):\n    return v\n",
        "tests/test_plain.py": "import hugepkg.mathy\n",
        "tests/test_from.py": "from hugepkg.mathy import clamp\n",
        "tests/test_parent.py": "from hugepkg import strs, mathy as m\n",
        "tests/test_indented.py": "def test_x():\n    from hugepkg.mathy import clamp\n",
        "tests/test_other.py": "from hugepkg.mathy_extra import thing\nimport hugepkg\n",
        "tests/test_comment.py": "# from hugepkg.mathy import clamp, in a comment\n"})
    repo = HostRepo.create(source, None, tmp_path / "git", tmp_path / "work")
    tree = repo.tree_of(repo.base)
    assert importers(repo, tree, ["hugepkg/mathy.py"]) == {
        "tests/test_plain.py", "tests/test_from.py", "tests/test_parent.py",
        "tests/test_indented.py"}
    assert importers(repo, tree, ["hugepkg/nothing_imports_me.py"]) == set()
    assert importers(repo, tree, ["README.md"]) == set()


@pytest.mark.parametrize(("output", "said"), [
    ("collected 100000 items\n\ntests/test_gen_000.py ......... [  0%]\n"
     "....................................... [ 37%]\n....",
     "it had reached about 37,000 of its 100,000 tests (37%, pytest's progress)"),
    ("[truncated 900 bytes]\n........ [ 52%]\n", "it had reached 52% of its tests"),
    ("collected 20 items\n", "it had collected 20 tests and finished none of them"),
    ("collecting ... ", "it had not finished collecting the tests"),
    ("", "how far it had got is not in its output"),
])
def test_how_far_a_stopped_run_got_is_read_from_pytests_progress(output: str,
                                                                   said: str) -> None:
    assert reached(output).startswith(said)


def test_a_baseline_over_the_budget_is_said_with_its_figures_and_the_line_that_gives_more(
        ) -> None:
    stopped = _run({}, timed_out=True, seconds=61.4,
                   output="collected 100000 items\n.... [ 12%]\n")
    by_test_timeout = over_budget(stopped, Budget(60.0, 60.0, 3600.0))
    assert by_test_timeout == (
        "the baseline alone exceeds the run's budget: the repository's tests ran 61 s and "
        "were stopped at the test timeout of 60 s (the `.github/frognano.yml` line "
        "`test_timeout_minutes:` gives it longer); it had reached about 12,000 of its "
        "100,000 tests (12%, pytest's progress), so no fix could be judged within the "
        "budget")
    by_run_time = over_budget(stopped, Budget(45.0, 900.0, 600.0))
    assert "stopped at the 45 s left of the run's 600 s after setup" in by_run_time
    assert "`timeout_minutes:`" in by_run_time


def test_fast_rounds_are_for_a_suite_with_many_tests_or_a_long_baseline_only() -> None:
    assert not fast_rounds(FAST_ROUNDS_MIN_TESTS - 1, FAST_ROUNDS_MIN_SECONDS - 1)
    assert fast_rounds(FAST_ROUNDS_MIN_TESTS, 1.0)
    assert fast_rounds(12, FAST_ROUNDS_MIN_SECONDS)
