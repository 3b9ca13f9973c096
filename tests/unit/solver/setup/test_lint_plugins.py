"""The inferred setup installs what the tests need and leaves the lint plugins out
(issue 29 §1), from files only."""

from __future__ import annotations

from pathlib import Path

from solver.setup.lint_plugins import LeftOut, expanded, is_lint_plugin
from solver.setup.python_setup import InferredSetup, infer_python_setup

PROJECT = "[project]\nname = 'p'\nversion = '1'\n"
# jaraco's skeleton (jaraco.functools 4.4.0, zipp 3.23): tox.ini installs five extras.
SKELETON = PROJECT + """[project.optional-dependencies]
test = ["pytest >= 6, != 8.1.*", "jaraco.classes"]
doc = ["sphinx >= 3.5", "jaraco.packaging >= 9.3"]
check = ["pytest-checkdocs >= 2.4", "pytest-ruff >= 0.2.1; sys_platform != 'cygwin'"]
cover = ["pytest-cov"]
enabler = ["pytest-enabler >= 3.4"]
type = ["pytest-mypy >= 1.0.1", "mypy < 1.19; python_implementation == 'PyPy'"]
"""
TOX = "[testenv]\ncommands =\n\tpytest {posargs}\nextras =\n\ttest\n\tcheck\n\tcover\n" \
      "\tenabler\n\ttype\n"


def _setup(root: Path, files: dict[str, str]) -> InferredSetup:
    for name, text in files.items():
        (root / name).write_text(text)
    setup = infer_python_setup(root)
    assert setup is not None
    return setup


def test_the_skeletons_lint_extras_are_left_out_and_said(tmp_path: Path) -> None:
    setup = _setup(tmp_path, {"pyproject.toml": SKELETON, "tox.ini": TOX})
    assert setup.command.endswith(
        "pip install -e '.[test,cover]' 'mypy < 1.19; python_implementation == "
        "'\"'\"'PyPy'\"'\"''")
    for plugin in ("pytest-checkdocs", "pytest-ruff", "pytest-enabler", "pytest-mypy"):
        assert plugin not in setup.command
    assert "the other requirements of its `type` extra" in setup.note
    assert setup.note.endswith(
        "; left out: pytest-checkdocs, pytest-ruff (the `check` extra); pytest-enabler (the "
        "`enabler` extra); pytest-mypy (the `type` extra): lint, type and format checks "
        "are no test of a fix, and their findings on the base code would stand against "
        "it; pytest-enabler turns them on when installed")


def test_a_test_extra_with_a_lint_plugin_goes_in_by_its_other_requirements(
        tmp_path: Path) -> None:
    setup = _setup(tmp_path, {"pyproject.toml": PROJECT + "[project.optional-dependencies]\n"
                              "testing = ['pytest>=8', 'pytest-flake8', 'freezegun']\n"})
    assert setup.command.endswith("pip install -e . 'pytest>=8' freezegun")
    assert "pytest-flake8 (the `testing` extra)" in setup.note


def test_an_extra_naming_the_projects_own_extras_is_read_through(tmp_path: Path) -> None:
    setup = _setup(tmp_path, {"pyproject.toml": PROJECT + "[project.optional-dependencies]\n"
                              "dev = ['p[unit,lint]', 'pytest-isort']\n"
                              "lint = ['ruff', 'pytest-black']\nunit = ['pytest', 'hypothesis']"
                              "\n"})
    assert setup.command.endswith("pip install -e . pytest hypothesis ruff")
    assert "pytest-black, pytest-isort (the `dev` extra)" in setup.note
    # An extra with no lint plugin, even through the project's own extras, goes in whole.
    assert expanded({"all": ["p[a]"], "a": ["p[all]", "x"]}, "all", "p") == ["x"]


def test_a_plugin_the_pytest_configuration_turns_on_is_installed(tmp_path: Path) -> None:
    # `addopts = --ruff`: without pytest-ruff, pytest stops on an unknown option.
    setup = _setup(tmp_path, {"pyproject.toml": SKELETON + "[tool.pytest.ini_options]\n"
                              "addopts = '--ruff --doctest-modules'\n", "tox.ini": TOX})
    assert setup.command.endswith(" pytest-ruff")
    assert "pytest-ruff" not in setup.note.partition("left out:")[2]
    assert "pytest-checkdocs (the `check` extra)" in setup.note


def test_groups_and_tox_deps_are_left_without_them(tmp_path: Path) -> None:
    setup = _setup(tmp_path, {
        "pyproject.toml": PROJECT + "[dependency-groups]\ntest = ['pytest', 'pytest-mypy']\n",
        "tox.ini": "[testenv]\ndeps =\n    pytest-pylint\n    coverage\ncommands = pytest\n"})
    assert setup.command.endswith("pip install -e . pytest coverage")
    assert "pytest-mypy (the `test` group); pytest-pylint (tox.ini's [testenv])" in setup.note


def test_what_is_a_lint_plugin() -> None:
    assert all(map(is_lint_plugin, ("pytest_ruff>=0.2", "pytest-mypy; python_version>'3'",
                                    "Pytest.Flake8", "pytest-enabler")))
    assert not any(map(is_lint_plugin, ("pytest-cov", "pytest-mypy-plugins", "ruff", "mypy",
                                        "pytest-xdist")))
    left = LeftOut()
    assert left.drop(["pytest", "pytest-black"], "x") == ["pytest"] and left.note()
    left.keep({"pytest-black"})
    assert left.note() == ""
