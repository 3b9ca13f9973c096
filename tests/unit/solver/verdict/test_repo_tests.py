"""Test-command detection on real files; comparing per-test results."""

from __future__ import annotations

from pathlib import Path

import pytest

from solver.verdict.repo_tests import (
    PYTEST_COMMAND,
    TestChange,
    compare_results,
    detect_test_command,
    unittest_with_report,
)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"pytest.ini": "[pytest]\n"}, ("pytest", PYTEST_COMMAND)),
        ({"pyproject.toml": "[tool.pytest.ini_options]\n"}, ("pytest", PYTEST_COMMAND)),
        ({"setup.cfg": "[tool:pytest]\n"}, ("pytest", PYTEST_COMMAND)),
        ({"tests/test_x.py": ""}, ("pytest", PYTEST_COMMAND)),
        ({"tox.ini": "[tox]\nenvlist = py311\n"}, ("tox", "tox")),
        ({"noxfile.py": ""}, ("nox", "nox")),
        ({"package.json": '{"scripts": {"test": "node --test"}}'}, ("npm", "npm test")),
        ({"go.mod": "module x\n"}, ("go", "go test -v ./...")),
        ({"Cargo.toml": "[package]\n"}, ("cargo", "cargo test")),
        ({"Makefile": "all:\n\techo\ntest: all\n\t./run\n"}, ("make", "make test")),
    ],
)
def test_detects_each_ecosystem(tmp_path: Path, files: dict[str, str],
                                expected: tuple[str, str]) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = detect_test_command(tmp_path)
    assert found is not None
    assert (found.source, found.command) == expected


def test_npm_placeholder_script_and_empty_tree_find_nothing(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text(
        '{"scripts": {"test": "echo \\"Error: no test specified\\" && exit 1"}}')
    (tmp_path / "README.md").write_text("hello")
    assert detect_test_command(tmp_path) is None


def test_broken_pyproject_does_not_crash_detection(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("this is = = not toml")
    (tmp_path / "go.mod").write_text("module x\n")
    found = detect_test_command(tmp_path)
    assert found is not None and found.source == "go"


def test_compare_results() -> None:
    before = {"a": "failed", "b": "passed", "c": "passed", "d": "failed"}
    after = {"a": "passed", "b": "passed", "c": "skipped"}
    changes = compare_results(before, after)
    assert changes == [TestChange("a", "failed", "passed"), TestChange("c", "passed", "skipped"),
                       TestChange("d", "failed", None)]


# Issue 20 §5: the test command the project's own files run.

def _files(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


MARKDOWN_TOX = ("[tox]\nenvlist = py311, flake8\n\n[testenv]\nextras = testing\n"
                "commands =\n    coverage run --source=markdown -m unittest discover "
                "{toxinidir}/tests\n    coverage report\n\n[testenv:flake8]\n"
                "commands = flake8 {toxinidir}/markdown\n")


def test_unittest_suite_from_tox_ini_beats_the_pytest_guess(tmp_path: Path) -> None:
    # markdown 3.11: test_*.py files (pytest's guess) and a tox.ini that runs unittest.
    _files(tmp_path, {"tox.ini": MARKDOWN_TOX, "tests/test_apis.py": "",
                      "tests/__init__.py": ""})
    found = detect_test_command(tmp_path)
    assert found is not None
    assert (found.command, found.source) == ("python3 -m unittest discover -s tests",
                                             "tox.ini [testenv]")


def test_makefile_ci_and_noxfile_commands(tmp_path: Path) -> None:
    _files(tmp_path, {"Makefile": "test:\n\tpython -m unittest -v ${tests}\n",
                      "tests/test_x.py": ""})
    assert getattr(detect_test_command(tmp_path), "command", None) == "python3 -m unittest"
    _files(tmp_path, {".github/workflows/ci.yml": (
        "jobs:\n  t:\n    steps:\n      - run: pip install pytest pytest-cov\n"
        "      - run: |\n          uv run pytest tests --cov\n")})
    found = detect_test_command(tmp_path)
    assert found is not None and found.source == ".github/workflows/ci.yml"
    assert found.command == f"{PYTEST_COMMAND} tests"
    _files(tmp_path, {"noxfile.py": "import nox\n@nox.session\ndef tests(session):\n"
                                    "    session.install('.')\n"
                                    "    session.run('python', '-m', 'unittest', 'discover',"
                                    " '-s', 'tests', '-p', '*_test.py')\n"})
    found = detect_test_command(tmp_path)
    assert found is not None and found.source == "noxfile.py"
    assert found.command == "python3 -m unittest discover -s tests -p '*_test.py'"


def test_pytest_from_tox_keeps_the_options_that_choose_the_suite(tmp_path: Path) -> None:
    # tabulate 0.10.0's tox.ini.
    _files(tmp_path, {"tox.ini": "[testenv]\ncommands = pytest -v --doctest-modules "
                                 "--ignore benchmark --cov=x {posargs}\n",
                      "benchmark/b.py": "", "test/test_t.py": ""})
    found = detect_test_command(tmp_path)
    assert found is not None
    assert found.command == f"{PYTEST_COMMAND} --doctest-modules --ignore benchmark"


def test_unittest_runs_through_the_harness_reporter() -> None:
    assert unittest_with_report("python3 -m unittest discover -s tests", "/c/r.xml") == (
        "python3 -m frognano_unittest_report --junitxml=/c/r.xml discover -s tests")
    assert unittest_with_report("python3 -m pytest", "/c/r.xml") is None
    assert unittest_with_report("python3 -m unittest; rm -rf x", "/c/r.xml") is None


def test_reporter_writes_per_test_junit(tmp_path: Path) -> None:
    import subprocess
    import sys

    from solver.verdict.junit_report import parse_junit
    from solver.verdict.verdict_run import GUARD_DIR

    _files(tmp_path, {"tests/__init__.py": "", "tests/test_a.py": (
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\n"
        "    def test_bad(self):\n        self.assertEqual(1, 2)\n"
        "    @unittest.skip('no')\n    def test_skip(self):\n        pass\n"),
        "tests/test_broken.py": "import no_such_module_x\n"})
    report = tmp_path / "report.xml"
    proc = subprocess.run([sys.executable, "-m", "frognano_unittest_report",
                           f"--junitxml={report}", "discover", "-s", "tests", "-t", "."],
                          cwd=tmp_path, env={"PYTHONPATH": str(GUARD_DIR)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "Ran 4 tests" in proc.stderr  # unittest's own output, for the model
    assert parse_junit(report.read_bytes()) == {
        "tests/test_a.py::T::test_ok": "passed", "tests/test_a.py::T::test_bad": "failed",
        "tests/test_a.py::T::test_skip": "skipped", "tests/test_broken.py": "error"}


def test_reporter_reports_errors_when_unittest_machinery_is_replaced(tmp_path: Path) -> None:
    """Code under test that wraps TestCase.run so a failure is added as a success (issue
    29): every test is reported an error, however the names were spelt."""
    import subprocess
    import sys

    from solver.verdict.junit_report import parse_junit
    from solver.verdict.verdict_run import GUARD_DIR

    _files(tmp_path, {"lib.py": (
        "import unittest as u\n_c, _n = getattr(u, 'Test' + 'Case'), 'r' + 'un'\n"
        "_run = getattr(_c, _n)\n\ndef _quiet(self, result=None):\n"
        "    if result is not None:\n        good = getattr(result, 'add' + 'Success')\n"
        "        setattr(result, 'add' + 'Failure', lambda t, e: good(t))\n"
        "    return _run(self, result)\n\nsetattr(_c, _n, _quiet)\n"),
        "tests/__init__.py": "", "tests/test_a.py": (
            "import unittest\n\nimport lib\n\nclass T(unittest.TestCase):\n"
            "    def test_bad(self):\n        self.assertEqual(1, 2)\n")})
    report = tmp_path / "report.xml"
    proc = subprocess.run([sys.executable, "-m", "frognano_unittest_report",
                           f"--junitxml={report}", "discover", "-s", "tests", "-t", "."],
                          cwd=tmp_path, env={"PYTHONPATH": f"{GUARD_DIR}:{tmp_path}"},
                          capture_output=True, text=True, timeout=60)
    assert "result machinery was replaced during the run (TestCase.run, " \
           "result.addFailure)" in proc.stderr, proc.stderr
    assert parse_junit(report.read_bytes()) == {"tests/test_a.py::T::test_bad": "error"}


@pytest.mark.parametrize("module", [
    "testsuite/test_all.py",  # pycodestyle
    "testing/test_iniconfig.py",  # iniconfig, pluggy (without their configuration)
    "colorama/tests/ansi_test.py",  # tests inside the package, named `*_test.py`
    "src/pkg/tests/test_x.py",  # a src/ layout's package tests
    "test_six.py",  # one test module at the root
])
def test_test_modules_where_real_projects_keep_them_are_pytest(tmp_path: Path,
                                                               module: str) -> None:
    (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / module).write_text("def test_x():\n    pass\n")
    found = detect_test_command(tmp_path)
    assert found is not None and (found.source, found.command) == ("pytest", PYTEST_COMMAND)


def test_modules_pytest_would_not_collect_are_no_test_suite(tmp_path: Path) -> None:
    """humanfriendly's `humanfriendly/tests.py`, a `docs/test_x.py` outside any test
    folder, and test modules behind a link out of the tree: no command is guessed."""
    root, other = tmp_path / "repo", tmp_path / "other"
    for name in ("humanfriendly/tests.py", "humanfriendly/__init__.py", "docs/test_x.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("def test_x():\n    pass\n")
    (other / "tests").mkdir(parents=True)
    (other / "tests" / "test_y.py").write_text("def test_y():\n    pass\n")
    (root / "tests").symlink_to(other / "tests")
    (root / "pkg").symlink_to(other)
    assert detect_test_command(root) is None


# Issue 29 §1: test commands that were not found.
UNITTEST_MODULE = ("import unittest\n\n\nclass T(unittest.TestCase):\n"
                   "    def test_ok(self):\n        pass\n")


def test_unittest_files_named_test_py_are_collected_too(tmp_path: Path) -> None:
    """`tests/test.py` is no `test_*.py`: pytest's default collection would miss it."""
    _files(tmp_path, {"tests/test.py": UNITTEST_MODULE, "tests/test_more.py": ""})
    found = detect_test_command(tmp_path)
    assert found is not None and found.source == "pytest"
    assert found.command == f"{PYTEST_COMMAND} -o 'python_files=test_*.py *_test.py test.py'"
    # The project's own python_files is the project's word on it.
    _files(tmp_path, {"pytest.ini": "[pytest]\npython_files = check_*.py\n"})
    assert getattr(detect_test_command(tmp_path), "command", None) == PYTEST_COMMAND


def test_a_readme_test_script_is_the_command_when_nothing_declares_one(
        tmp_path: Path) -> None:
    readme = ("# p\n\nRun the tests:\n\n```console\n$ pip install -e .\n"
              "$ python tests/runner.py -v\n```\n\nSee `python example.py` too.\n")
    _files(tmp_path, {"README.md": readme, "example.py": "",
                      "tests/runner.py": "import sys\nsys.exit(0)\n"})
    found = detect_test_command(tmp_path)
    assert found is not None and found.source == "README.md"
    assert found.command == "python3 tests/runner.py"  # run as the README says
    # A script that defines its tests itself goes through pytest: a per-test report.
    _files(tmp_path, {"tests/runner.py": UNITTEST_MODULE + "\nunittest.main()\n"})
    assert getattr(detect_test_command(tmp_path), "command", None) == \
        f"{PYTEST_COMMAND} tests/runner.py"
    # decorator 5.3.1's README.rst: the command as an inline literal.
    _files(tmp_path, {"README.md": "Run them with\n\n `$ python tests/runner.py -v`\n"})
    assert getattr(detect_test_command(tmp_path), "source", None) == "README.md"


def test_a_readme_line_that_is_no_test_script_is_no_command(tmp_path: Path) -> None:
    # example.py is no test path: the verdict would not put it back, so it judges nothing.
    _files(tmp_path, {"README.rst": "Usage::\n\n    python example.py\n    python ../x_test.py\n",
                      "example.py": "print(1)\n"})
    assert detect_test_command(tmp_path) is None


def test_a_justfile_test_recipe_through_uv_run(tmp_path: Path) -> None:
    _files(tmp_path, {"justfile": "set dotenv-load\n\nlint:\n    uv run ruff check\n\n"
                                  "# Run the tests\ntest *args:\n"
                                  "    uv run --all-extras --python 3.11 pytest tests "
                                  "{{args}}\n\nversion := '1'\n",
                      "tests/test_x.py": ""})
    found = detect_test_command(tmp_path)
    assert found is not None and found.source == "justfile"
    assert found.command == f"{PYTEST_COMMAND} tests"


def test_benchmarks_are_left_out_when_nothing_names_the_test_paths(tmp_path: Path) -> None:
    _files(tmp_path, {"tests/test_x.py": "", "benchmarks/test_speed.py": "", "bench/b.py": ""})
    assert getattr(detect_test_command(tmp_path), "command", None) == (
        f"{PYTEST_COMMAND} --ignore bench --ignore benchmarks")
    _files(tmp_path, {"tox.ini": "[testenv]\ncommands = pytest --ignore=bench\n"})
    assert getattr(detect_test_command(tmp_path), "command", None) == (
        f"{PYTEST_COMMAND} --ignore=bench --ignore benchmarks")
    _files(tmp_path, {"tox.ini": "[testenv]\ncommands = pytest tests\n"})
    assert getattr(detect_test_command(tmp_path), "command", None) == f"{PYTEST_COMMAND} tests"
    _files(tmp_path, {"tox.ini": "[testenv]\ncommands = pytest\n",
                      "pytest.ini": "[pytest]\ntestpaths = tests\n"})
    assert getattr(detect_test_command(tmp_path), "command", None) == PYTEST_COMMAND


@pytest.mark.parametrize(("files", "expected"), [
    ({"README.md": "docs", "pkg/__init__.py": "", "pkg/core.py": ""}, False),
    ({"README.md": "docs", ".git/tests/test_x.py": "", "latest.py": ""}, False),
    ({"pkg/__init__.py": "", "pkg/tests/helpers.py": ""}, True),
    ({"src/test_core.py": ""}, True),
    ({"test.py": ""}, True),
    ({"web/app.test.js": ""}, True),
])
def test_a_tree_with_no_test_file_at_all(tmp_path: Path, files: dict[str, str],
                                         expected: bool) -> None:
    from solver.verdict.repo_tests import has_test_files
    assert has_test_files(_files(tmp_path, files)) is expected
