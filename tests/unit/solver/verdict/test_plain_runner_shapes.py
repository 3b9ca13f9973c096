"""The run outside pytest (solver/verdict/plain_runner.py) on the shapes of tests pytest
runs that it once could not: parameter sets chosen by the ids real pytest gave them
(stacked, on the class and the module, ids lists, callables and `pytest.param(id=)`,
duplicates), `usefixtures` on a class and a module, fixtures as a test's arguments,
doctests in modules and text files; a test module that imports pytest with none of
pytest's modules in sys.modules when the library runs; a test's own skip told from the
runner's "cannot run"; Django's settings read from the pytest configuration as written.
Each runs on this venv's pytest and on Debian's older one where it has one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from solver.verdict import plain_runner
from tests.unit.solver.verdict.test_plain_runner import PYTHONS, run_plain

LIBRARY = '''import sys

CALLS = []


def pytest_seen():
    return sorted(n for n in sys.modules if n.split(".")[0] in ("pytest", "_pytest", "pluggy"))


def half(x):
    CALLS.append(pytest_seen())
    if x < 0:
        raise ValueError("negative")
    return x / 2


def main_file():
    return getattr(sys.modules["__main__"], "__file__", ""), sys.argv[0]
'''
PARAMS = '''import enum
import json
import os

import pytest

import lib


class Colour(enum.Enum):
    RED = 1


def log(*values):
    with open(os.environ["PARAM_LOG"], "a") as out:
        out.write(json.dumps([repr(v) for v in values]) + "\\n")


@pytest.mark.parametrize("x", [0, 1.5, "a b", None, True, b"by", "\\u00e9", Colour.RED, len,
                               "q" * 120])
def test_one(x):
    log(x)


@pytest.mark.parametrize("x", [1, 2])
@pytest.mark.parametrize("y, z", [("p", 3), pytest.param("q", 4, id="custom")])
def test_stacked(x, y, z):
    log(x, y, z)


@pytest.mark.parametrize("v", ["a", "a", "b", "1", "1", "7"])
def test_duplicates(v):
    log(v)


@pytest.mark.parametrize("v", [[1], [2], [3]], ids=["one", None, "three"])
def test_ids_list(v):
    log(v)


@pytest.mark.parametrize("v", [10, 20], ids=lambda v: f"v{v // 10}")
def test_ids_callable(v):
    log(v)


@pytest.mark.parametrize("c", ["x", "y"])
class TestOnClass:
    @pytest.mark.parametrize("m", [7])
    def test_method(self, c, m):
        log(c, m)
'''
FIXTURES_CONFTEST = '''import pytest

import lib


@pytest.fixture(scope="class")
def parser(request):
    if request.cls is not None:  # a module's function has none, under pytest too
        request.cls.parser = staticmethod(lib.half)


@pytest.fixture
def seeded(request):
    request.instance.seed = 8


@pytest.fixture
def number(tmp_path):
    (tmp_path / "n").write_text("6")
    return int((tmp_path / "n").read_text())


@pytest.fixture
def asks_node(request):
    return request.node.name
'''
FIXTURES_TESTS = '''import pytest

import lib

pytestmark = pytest.mark.usefixtures("parser")


@pytest.mark.usefixtures("seeded")
class TestParser:
    def test_class_fixture(self):
        assert self.parser(self.seed) == 4

    def test_argument(self, number):
        assert self.parser(number) == 3


def test_module_usefixtures_and_raises():
    with pytest.raises(ValueError):
        lib.half(-1)
    assert lib.half(0.6) == pytest.approx(0.3)
    assert len(lib.CALLS) >= 2 and all(seen == [] for seen in lib.CALLS), lib.CALLS


def test_skips_itself():
    pytest.skip("not here")


def test_plugin_fixture(mocker):
    pass


def test_asks_the_node(asks_node):
    assert asks_node
'''
DOCTESTS = '''"""Halves.

>>> half(4)
2.0
"""


def half(x):
    """
    >>> half(1)
    0.5
    >>> [half(n) for n in range(3)]  # doctest: +ELLIPSIS
    [0.0, ...]
    """
    return x / 2


def broken():
    """
    >>> broken()
    2
    """
    return 1


class Shelf:
    def count(self):
        """
        >>> Shelf().count()
        0
        """
        return 0
'''


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _pytest_ids(python: str, tree: Path, *args: str) -> list[str]:
    done = subprocess.run([python, "-m", "pytest", "--collect-only", "-q", "-p",
                           "no:cacheprovider", *args], cwd=tree, capture_output=True,
                          text=True, timeout=120, env={"PATH": os.environ["PATH"]})
    return [line for line in done.stdout.splitlines() if "::" in line]


def _logged(python: str, tree: Path, log: Path, ids: list[str], by_pytest: bool) -> list[str]:
    log.write_text("")
    env = {"PATH": os.environ["PATH"], "PARAM_LOG": str(log)}
    if by_pytest:
        subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ids],
                       cwd=tree, env=env, capture_output=True, timeout=120, check=True)
    else:
        report = tree.parent / "report.json"
        report.write_text("")
        spec = {"report": str(report), "token": "t", "tests": [i.split("::", 1) for i in ids]}
        subprocess.run([python, str(plain_runner.__file__)], input=json.dumps(spec),
                       text=True, cwd=tree, check=True, timeout=120, env=env)
        lines = [json.loads(line) for m in json.loads(report.read_text())["modules"]
                 for line in m["lines"].splitlines()]
        assert all(line["status"] == "passed" for line in lines), \
            [line for line in lines if line["status"] != "passed"]
    return log.read_text().splitlines()


@pytest.mark.parametrize("python", PYTHONS)
def test_each_parameter_set_is_the_one_pytest_named(tmp_path: Path, python: str) -> None:
    """Every id real pytest collected, in its order: the same values reach each test (one
    line each, in the order both run them)."""
    tree = _tree(tmp_path / "tree", {"lib.py": LIBRARY, "tests/test_params.py": PARAMS})
    ids = _pytest_ids(python, tree)
    assert len(ids) == 10 + 4 + 6 + 3 + 2 + 2, ids
    log = tmp_path / "log"
    plain = _logged(python, tree, log, ids, by_pytest=False)
    assert plain == _logged(python, tree, log, ids, by_pytest=True)
    assert len(plain) == len(ids)


@pytest.mark.parametrize("python", PYTHONS)
def test_an_id_no_set_has_is_cannot_run(tmp_path: Path, python: str) -> None:
    tree = _tree(tmp_path / "tree", {"lib.py": LIBRARY, "tests/test_params.py": PARAMS})
    results = run_plain(python, tree, ["tests/test_params.py::test_one[nothing]",
                                       "tests/test_params.py::test_one"])
    assert results == {
        "tests/test_params.py::test_one[nothing]":
            "cannot run: 0 of its parameter sets have the id [nothing]",
        "tests/test_params.py::test_one":
            "cannot run: its id names no parameter set, but it is parametrized"}


@pytest.mark.parametrize("python", PYTHONS)
def test_usefixtures_arguments_pytest_hidden_and_skips(tmp_path: Path, python: str) -> None:
    tree = _tree(tmp_path / "tree", {"lib.py": LIBRARY, "tests/conftest.py": FIXTURES_CONFTEST,
                                     "tests/test_fixtures.py": FIXTURES_TESTS})
    ids = _pytest_ids(python, tree)
    results = run_plain(python, tree, ids)
    assert results == {
        "tests/test_fixtures.py::TestParser::test_class_fixture": "passed",
        "tests/test_fixtures.py::TestParser::test_argument": "passed",
        "tests/test_fixtures.py::test_module_usefixtures_and_raises": "passed",
        "tests/test_fixtures.py::test_skips_itself": "skipped: not here",
        "tests/test_fixtures.py::test_plugin_fixture": "cannot run: fixture mocker is not in "
        "the base's conftest.py files or the module (a plugin's?)",
        "tests/test_fixtures.py::test_asks_the_node": "cannot run: a fixture asked for "
        "request.node, which this runner does not give"}


GENERATED = '''import unittest


def made(expected):
    def test(self):
        assert expected == 2
    return test


class TestMade(unittest.TestCase):
    test_two = made(2)
    test_three = made(3)


class TestPlain:
    test_two = made(2)
'''


def test_a_method_is_called_by_its_name_in_the_class(tmp_path: Path) -> None:
    """A generated method's __name__ is its factory's (markdown's legacy tests): the id's
    name is the one called."""
    tree = _tree(tmp_path / "tree", {"tests/test_made.py": GENERATED})
    results = run_plain(sys.executable, tree, [
        "tests/test_made.py::TestMade::test_two", "tests/test_made.py::TestMade::test_three",
        "tests/test_made.py::TestPlain::test_two"])
    assert results.pop("tests/test_made.py::TestMade::test_three").startswith(
        "failed: AssertionError: failed: ")
    assert results == {"tests/test_made.py::TestMade::test_two": "passed",
                       "tests/test_made.py::TestPlain::test_two": "passed"}


@pytest.mark.parametrize("python", PYTHONS)
def test_doctests_in_modules_and_text_files(tmp_path: Path, python: str) -> None:
    """Run by the standard library's doctest under pytest's default flags (ELLIPSIS), with
    `__main__` and `sys.argv[0]` not pytest's."""
    tree = _tree(tmp_path / "tree", {
        "pkg/__init__.py": "", "pkg/halves.py": DOCTESTS, "lib.py": LIBRARY,
        "docs/usage.txt": ">>> import lib\n>>> 'pytest' in ''.join(lib.main_file())\nFalse\n",
        "setup.cfg": "[tool:pytest]\naddopts = --doctest-modules --doctest-glob=*.txt\n"})
    ids = [i for i in _pytest_ids(python, tree) if "halves" in i or "usage" in i]
    assert len(ids) == 5, ids
    results = run_plain(python, tree, ids)
    assert results.pop("pkg/halves.py::pkg.halves.broken").startswith(
        "failed: AssertionError: ")
    assert results == {
        "pkg/halves.py::pkg.halves": "passed", "pkg/halves.py::pkg.halves.half": "passed",
        "pkg/halves.py::pkg.halves.Shelf.count": "passed", "docs/usage.txt::usage.txt": "passed"}


def test_a_doctest_gone_outside_pytest_disagrees(tmp_path: Path) -> None:
    """A docstring present under pytest and not here is not the runner's doing."""
    tree = _tree(tmp_path / "tree", {"pkg/__init__.py": "", "pkg/halves.py": DOCTESTS + (
        "\nimport sys\nif 'pytest' not in sys.modules:\n    half.__doc__ = None\n")})
    assert run_plain(sys.executable, tree, ["pkg/halves.py::pkg.halves.half"])[
        "pkg/halves.py::pkg.halves.half"].startswith("error: AssertionError: its doctest is "
                                                      "not in pkg.halves")


@pytest.mark.parametrize(("name", "text"), [
    ("pyproject.toml", '[tool.pytest.ini_options]\nDJANGO_SETTINGS_MODULE = "site.settings"\n'
                       'doctest_optionflags = ["NORMALIZE_WHITESPACE"]\n'),
    ("pytest.ini", "[pytest]\nDJANGO_SETTINGS_MODULE = site.settings\n"
                   "doctest_optionflags = NORMALIZE_WHITESPACE\n"),
    ("setup.cfg", "[tool:pytest]\nDJANGO_SETTINGS_MODULE = site.settings\n"
                  "doctest_optionflags = NORMALIZE_WHITESPACE\n"),
    ("tox.ini", "[pytest]\naddopts = -q --ds=site.settings\n"
                "doctest_optionflags = NORMALIZE_WHITESPACE\n"),
])
def test_the_pytest_configuration_is_read_as_written(
        tmp_path: Path, name: str, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """DJANGO_SETTINGS_MODULE in upper case, as pytest-django reads it (TOML keeps the
    case; configparser would lower it)."""
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    (tmp_path / name).write_text(text)
    ini = plain_runner.pytest_ini(str(tmp_path))
    assert plain_runner.django_settings(ini) == "site.settings"
    assert plain_runner.doctest_flags(ini) == plain_runner.doctest.NORMALIZE_WHITESPACE


def test_pytest_ini_wins_and_pytest_own_flags_cannot_run(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\ndoctest_optionflags = NUMBER\n")
    (tmp_path / "setup.cfg").write_text("[tool:pytest]\nDJANGO_SETTINGS_MODULE = x\n")
    ini = plain_runner.pytest_ini(str(tmp_path))
    assert "DJANGO_SETTINGS_MODULE" not in ini
    with pytest.raises(plain_runner.CannotRun, match="NUMBER is pytest's own"):
        plain_runner.doctest_flags(ini)


def test_a_django_import_failure_is_explained_only_without_settings() -> None:
    """Django's ImproperlyConfigured at import is pytest-django's absence when this runner
    set up no settings; once it did, it is the test's own error."""
    improperly = type("ImproperlyConfigured", (Exception,), {"__module__":
                                                             "django.core.exceptions"})
    assert "pytest-django" in plain_runner.plugin_explains(improperly(), False)
    assert plain_runner.plugin_explains(improperly(), True) == ""
    assert plain_runner.plugin_explains(ImportError("django"), False) == ""


@pytest.mark.parametrize("python", PYTHONS)
def test_a_test_named_as_its_module_is_that_test_not_the_modules_doctest(
        tmp_path: Path, python: str) -> None:
    """`test_abs` in test_abs.py, with and without parameters: pytest's ids for them look
    like the module doctest's (named by the module), which runs only when there is no
    such test."""
    module = ('import pytest\n\n\n@pytest.mark.parametrize("p", ["/tmp"])\n'
              'def test_abs(p):\n    assert len(p) == 4\n')
    doctests = '"""\n>>> 1 + 1\n2\n"""\n'
    tree = _tree(tmp_path / "tree", {"tests/test_abs.py": module,
                                     "tests/test_plain.py": "def test_plain():\n    pass\n",
                                     "lib_doc.py": doctests})
    results = run_plain(python, tree, ["tests/test_abs.py::test_abs[/tmp]",
                                       "lib_doc.py::lib_doc"])
    assert results == {"tests/test_abs.py::test_abs[/tmp]": "passed",
                       "lib_doc.py::lib_doc": "passed"}
