"""The run outside pytest (solver/verdict/plain_runner.py), run here as the verdict runs it
(its spec on stdin, one write of its results), without a sandbox: the repository's
fixtures around the tests, parameter sets chosen by the ids real pytest gave them,
doctests, pytest out of sys.modules for a test module that imports it; on this venv's
pytest and on Debian's older one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from solver.verdict.outside_pytest import RUNNER

PYTHONS = [sys.executable] + [p for p in ("/usr/bin/python3",) if subprocess.run(
    [p, "-c", "import pytest"], capture_output=True).returncode == 0] \
    if os.path.exists("/usr/bin/python3") else [sys.executable]
CONFTEST = '''import os
import pytest

import pond

CALLS = []


@pytest.fixture(scope="module", autouse=True)
def once_per_module():
    CALLS.append("module")
    yield
    CALLS.append("module done")


@pytest.fixture(autouse=True)
def pond_name(monkeypatch, tmp_path):
    monkeypatch.setenv("POND_NAME", "Frog")
    monkeypatch.chdir(tmp_path)
'''
TESTS = '''import os
import sys

import conftest
import pond


def test_env_and_directory():
    assert os.environ["POND_NAME"] == "Frog" and os.listdir(".") == []


def test_module_fixture_ran_once():
    assert conftest.CALLS == ["module"]


def test_no_pytest_loaded_now_nor_at_import():
    assert "_pytest" not in sys.modules and not pond.PYTEST_AT_IMPORT
'''
# A module of its own: it imports pytest, as a test class with its own fixture does.
CLASS_TESTS = '''import pytest


class TestWithOwnFixture:
    @pytest.fixture(autouse=True)
    def own(self):
        pass

    def test_skipped(self):
        pass
'''


def run_plain(python: str, tree: Path, tests: list[str]) -> dict[str, str]:
    report = tree.parent / "report.json"
    report.write_text("")
    spec = {"report": str(report), "token": "t",
            "tests": [test.split("::", 1) for test in tests]}
    subprocess.run([python, str(RUNNER)], input=json.dumps(spec), text=True, cwd=tree,
                   check=True, timeout=120, env={"PATH": os.environ["PATH"]})
    said = json.loads(report.read_text())
    return {f"{module['file']}::{json.loads(line)['test']}": json.loads(line)["status"]
            + (": " + json.loads(line)["detail"] if json.loads(line)["detail"] else "")
            for module in said["modules"] for line in module["lines"].splitlines()}


def project(root: Path, conftest: str = CONFTEST, tests: str = TESTS) -> Path:
    tree = root / "tree"
    (tree / "tests").mkdir(parents=True)
    (tree / "pond.py").write_text("import sys\nPYTEST_AT_IMPORT = '_pytest' in sys.modules\n")
    (tree / "tests" / "conftest.py").write_text(conftest)
    (tree / "tests" / "test_pond.py").write_text(tests)
    (tree / "tests" / "test_class.py").write_text(CLASS_TESTS)
    return tree


@pytest.mark.parametrize("python", PYTHONS)
def test_autouse_fixtures_run_around_the_tests_with_no_pytest_loaded(
        tmp_path: Path, python: str) -> None:
    results = run_plain(python, project(tmp_path), [
        "tests/test_pond.py::test_env_and_directory",
        "tests/test_pond.py::test_module_fixture_ran_once",
        "tests/test_pond.py::test_no_pytest_loaded_now_nor_at_import",
        "tests/test_class.py::TestWithOwnFixture::test_skipped"])
    assert results == {
        "tests/test_pond.py::test_env_and_directory": "passed",
        "tests/test_pond.py::test_module_fixture_ran_once": "passed",
        "tests/test_pond.py::test_no_pytest_loaded_now_nor_at_import": "passed",
        "tests/test_class.py::TestWithOwnFixture::test_skipped":
            "cannot run: its class's own autouse fixtures are not run outside pytest"}


@pytest.mark.parametrize("python", PYTHONS)
def test_a_fixture_it_cannot_give_is_cannot_run_and_a_failing_one_is_an_error(
        tmp_path: Path, python: str) -> None:
    conftest = ('import pytest\n\n\n@pytest.fixture(autouse=True)\ndef needs(capsys):\n'
                '    pass\n')
    skipped = run_plain(python, project(tmp_path / "a", conftest, "def test_a():\n    pass\n"),
                        ["tests/test_pond.py::test_a"])
    assert skipped == {"tests/test_pond.py::test_a": "cannot run: fixture capsys is not in the "
                       "base's conftest.py files or the module (a plugin's?)"}
    conftest = ('import pytest\n\n\n@pytest.fixture(autouse=True)\ndef broken():\n'
                '    raise RuntimeError("no database")\n')
    failed = run_plain(python, project(tmp_path / "b", conftest, "def test_a():\n    pass\n"),
                       ["tests/test_pond.py::test_a"])
    assert failed == {"tests/test_pond.py::test_a":
                      "error: fixture broken: RuntimeError: no database"}


def test_without_an_autouse_fixture_no_conftest_is_imported(tmp_path: Path) -> None:
    """A tree that declares none runs as the check always did: conftest.py untouched."""
    conftest = "raise SystemExit('imported')\n"
    results = run_plain(sys.executable, project(tmp_path, conftest, "def test_a():\n    pass\n"),
                        ["tests/test_pond.py::test_a"])
    assert results == {"tests/test_pond.py::test_a": "passed"}
