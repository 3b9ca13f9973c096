"""Poetry's dependency groups in the inferred setup (solver/setup/poetry.py): pip never
reads them, so a Poetry project's pytest and the libraries its tests import come from
here, its constraints rewritten as PEP 440."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from solver.setup.poetry import groups, requirement, specifier
from solver.setup.python_setup import InferredSetup, infer_python_setup

POETRY_BUILD = ("[build-system]\nrequires = ['poetry-core']\n"
                "build-backend = 'poetry.core.masonry.api'\n\n"
                "[tool.poetry]\nname = 'p'\nversion = '1.0'\n\n"
                "[tool.poetry.dependencies]\npython = '^3.9'\nrequests = '^2.28'\n\n")


@pytest.mark.parametrize(("constraint", "inside", "outside"), [
    ("^1.2.3", ["1.2.3", "1.9"], ["1.2.2", "2.0"]),
    ("^0.2.3", ["0.2.3", "0.2.9"], ["0.3.0"]),
    ("^0.0.3", ["0.0.3"], ["0.0.4", "0.0.2"]),
    ("^0", ["0.9"], ["1.0"]),
    ("~1.2.3", ["1.2.3", "1.2.9"], ["1.3.0"]),
    ("~1", ["1.9"], ["2.0"]),
    ("1.2.3", ["1.2.3"], ["1.2.4"]),
    ("1.2.*", ["1.2.7"], ["1.3"]),
    (">= 1.2 < 2", ["1.5"], ["2.0", "1.1"]),
    ("=1.0", ["1.0"], ["1.1"]),
])
def test_poetry_constraints_mean_what_they_mean_to_poetry(
        constraint: str, inside: list[str], outside: list[str]) -> None:
    rewritten = Requirement(f"x{specifier(constraint)}").specifier
    assert all(Version(v) in rewritten for v in inside), (constraint, rewritten)
    assert not any(Version(v) in rewritten for v in outside), (constraint, rewritten)


def test_what_is_not_rewritten_keeps_the_package_unpinned_or_leaves_it_out() -> None:
    assert specifier("*") == "" and specifier("^1 || ^2") is None
    assert requirement("pkg", "^1 || ^2") == "pkg"  # its tests still import it
    assert requirement("pkg", {"git": "https://example.invalid/pkg.git"}) is None
    assert requirement("pkg", {"path": "../pkg", "develop": True}) is None
    assert requirement("pkg", [{"version": "^1", "python": "<3.8"},
                               {"version": "^2", "python": ">=3.8"}]) == "pkg"
    pinned = requirement("pytest", {"version": "^8.0", "extras": ["testing"],
                                    "python": "^3.8"})
    assert pinned is not None
    parsed = Requirement(pinned)
    assert (parsed.name, parsed.extras, str(parsed.specifier)) == (
        "pytest", {"testing"}, "<9,>=8.0")
    assert parsed.marker is not None and parsed.marker.evaluate({"python_full_version":
                                                                 "3.11.2"})


def _inferred(root: Path, groups_toml: str) -> InferredSetup:
    """The setup inferred for a Poetry project with these group tables."""
    (root / "pyproject.toml").write_text(POETRY_BUILD + groups_toml)
    setup = infer_python_setup(root)
    assert setup is not None
    return setup


def test_the_test_group_is_installed_and_the_others_are_not(tmp_path: Path) -> None:
    setup = _inferred(tmp_path, "[tool.poetry.group.test.dependencies]\npytest = '^8.0'\n"
                      "freezegun = {version = '^1.2'}\nlocal-helper = {path = 'helpers'}\n\n"
                      "[tool.poetry.group.docs.dependencies]\nsphinx = '*'\n")
    assert setup.command.endswith("pip install -e . 'pytest<9,>=8.0' 'freezegun<2,>=1.2'"), \
        setup.command
    assert "sphinx" not in setup.command and "requests" not in setup.command
    assert "its Poetry `test` group (left out: local-helper; a path, git or url " \
        "dependency, or no package name)" in setup.note, setup.note


def test_the_old_dev_dependencies_table_and_a_group_that_lists_pytest(tmp_path: Path) -> None:
    old = {"tool": {"poetry": {"dev-dependencies": {"pytest": "^7.0", "black": "*"}}}}
    assert groups(old)["dev"].requirements == ("pytest<8,>=7.0", "black")
    setup = _inferred(tmp_path, "[tool.poetry.group.lint.dependencies]\nruff = '*'\n\n"
                      "[tool.poetry.group.ci.dependencies]\npytest-mock = '^3'\n"
                      "pytest = '>=8'\n")
    assert setup.command.endswith("pip install -e . 'pytest-mock<4,>=3' 'pytest>=8'")


def test_a_malformed_poetry_table_is_no_group() -> None:
    assert groups({"tool": {"poetry": "nonsense"}}) == {}
    assert groups({"tool": {"poetry": {"group": {"test": {"dependencies": ["pytest"]}}}}}) \
        == {}
    assert groups({"tool": {"poetry": {"group": ["test"]}}}) == {}


def test_a_hostile_name_never_reaches_pip_as_an_option(tmp_path: Path) -> None:
    """A hostile repository's pyproject.toml: a "dependency" named as a pip option, or as
    a shell command, is left out (and named), never passed on."""
    setup = _inferred(tmp_path, "[tool.poetry.group.test.dependencies]\npytest = '*'\n"
                      "'--index-url=http://198.51.100.7/simple' = '*'\n"
                      "'-rconstraints.txt' = 'junk'\n'x; $(touch pwned)' = '*'\n")
    assert setup.command.endswith("pip install -e . pytest"), setup.command
    assert "198.51.100.7" in setup.note and "pwned" not in setup.command
