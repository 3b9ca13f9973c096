"""A baseline where pytest itself failed is no baseline (issue 29 §1): the run stops before
the model, saying why with the last lines of pytest's own output. Each case runs the real
pytest on a project whose conftest.py raises where a broken plugin does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from solver.agent.harness import baseline_problem, pytest_failed
from solver.verdict.repo_tests import TestVerdict

COMMAND = "python3 -m pytest -rA -p no:cacheprovider"
TEST = "def test_one():\n    assert 1 == 1\n\n\ndef test_two():\n    assert 1 == 2\n"
CONFTESTS = {
    # A plugin's option hook raising at startup: pytest exits 1, its traceback only.
    "addoption": "def pytest_addoption(parser):\n    raise RuntimeError('plugin broke')\n",
    # A session hook raising after the tests ran: no report, no summary, exit 1.
    "sessionfinish": "import pytest\n\n\n@pytest.hookimpl(tryfirst=True)\n"
                     "def pytest_sessionfinish(session):\n"
                     "    raise RuntimeError('plugin broke')\n",
    # pytest_configure raising: INTERNALERROR, exit 3.
    "configure": "def pytest_configure(config):\n    raise RuntimeError('plugin broke')\n",
}


def _baseline(root: Path, conftest: str, *, asked: bool = True) -> TestVerdict:
    """The real pytest on a two-test project with `conftest`, as the harness runs it: a
    junit report asked for (unless not `asked`), its absence read as report "none"."""
    (root / "test_it.py").write_text(TEST)
    (root / "conftest.py").write_text(conftest)
    report = root / "report.xml"
    report.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
                           *([f"--junitxml={report}"] if asked else [])], cwd=root,
                          capture_output=True, text=True, timeout=120)
    return TestVerdict(COMMAND, done.returncode, False, 1.0, done.stdout + done.stderr,
                       report="junit" if report.exists() else "none")


@pytest.mark.parametrize("hook", list(CONFTESTS))
def test_pytest_failing_before_its_report_is_no_baseline(tmp_path: Path, hook: str) -> None:
    baseline = _baseline(tmp_path, CONFTESTS[hook])
    assert baseline.report == "none" and baseline.exit_code in (1, 3), baseline.output

    problem = baseline_problem(baseline, None)

    assert problem is not None and problem.startswith(
        f"pytest itself failed before it wrote its report (exit {baseline.exit_code}: ")
    assert "so no test result is known; the last lines of its output: «" in problem
    assert "RuntimeError: plugin broke" in problem, problem


def test_a_missing_module_in_a_plugin_names_its_package(tmp_path: Path) -> None:
    baseline = _baseline(tmp_path, "def pytest_addoption(parser):\n    import yaml_plugin_x\n")
    problem = pytest_failed(baseline, None)
    assert problem is not None and "ModuleNotFoundError: No module named 'yaml_plugin_x'" \
        in problem and "The tests import `yaml_plugin_x`, which setup did not install" \
        in problem


def test_tests_that_ran_and_fail_are_a_baseline(tmp_path: Path) -> None:
    """A failing test is what a baseline is for; a run that printed its session summary
    ran its tests, even where no report came (a wrapper that drops PYTEST_ADDOPTS, a
    project that turns junitxml off: judged by exit code, as before)."""
    ran = _baseline(tmp_path, "")
    assert (ran.report, ran.exit_code) == ("junit", 1)
    assert baseline_problem(ran, None) is None
    unreported = _baseline(tmp_path, "", asked=False)
    assert (unreported.report, unreported.exit_code) == ("none", 1)
    assert baseline_problem(unreported, None) is None


def test_a_runner_that_is_not_pytest_keeps_its_exit_code(tmp_path: Path) -> None:
    crashed = _baseline(tmp_path, CONFTESTS["addoption"])
    other = TestVerdict("make check", crashed.exit_code, False, 1.0, crashed.output)
    assert baseline_problem(other, None) is None


def test_the_output_shown_is_its_last_lines_cut() -> None:
    output = "\n".join(f"line {n} " + "x" * 300 for n in range(10)) + "\n\n"
    baseline = TestVerdict(COMMAND, 1, False, 1.0, output)
    problem = pytest_failed(baseline)
    assert problem is not None
    assert problem.count("«line ") == 4 and "«line 6 " in problem and "«line 5 " not in problem
    assert max(len(part) for part in problem.split("«")[1:]) <= 160 + len("» / ")
