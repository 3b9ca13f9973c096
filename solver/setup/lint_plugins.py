"""Lint, type and format checks that pytest plugins make into test items (issue 29 §1).

pytest-ruff, pytest-mypy, pytest-flake8, pytest-checkdocs and their like add an item per
file (`pkg/mod.py::ruff`, `pkg/mod.py::mypy`, `.::project`) whose failure is a finding of
the checker, not of what the code does; jaraco's pytest-enabler turns them on (and
coverage, xdist) whenever they are installed. A `test` extra, or the extras of the tox
environment that runs the tests (jaraco's skeleton: `test check cover enabler type`),
lists them beside what the tests need, and installed whole they fail the baseline on
findings no fix is about: the index's newest ruff has rules the project never ran,
checkdocs builds the project with no network. The inferred setup installs the rest of
such an extra by name and leaves the plugins out, unless the project's own pytest
configuration turns one on (`addopts = --ruff`): pytest does not start without it, so it
is installed, and the verdict's rule for lint items holds (solver/verdict/lint_items.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from solver.setup.project_files import requirement_name

# By their normalised names. Not here: plugins that test a type checker's plugin or
# stubs with test cases of their own (pytest-mypy-plugins, pytest-mypy-testing).
LINT_PLUGINS = frozenset({
    "pytest-ruff", "pytest-mypy", "pytest-checkdocs", "pytest-enabler", "pytest-flake8",
    "pytest-flake8-v2", "pytest-flakes", "pytest-pyflakes", "pytest-black",
    "pytest-black-ng", "pytest-isort", "pytest-pylint", "pytest-pycodestyle",
    "pytest-pydocstyle", "pytest-codestyle", "pytest-docstyle", "pytest-mccabe",
    "pytest-pep8", "pytest-pep257",
})
WHY = ("lint, type and format checks are no test of a fix, and their findings on the "
       "base code would stand against it; pytest-enabler turns them on when installed")
_SELF_EXTRAS = re.compile(r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*\[([^\]]*)\]")


def is_lint_plugin(requirement: str) -> bool:
    return requirement_name(requirement) in LINT_PLUGINS


@dataclass
class LeftOut:
    """The lint plugins left out of the inferred setup, by where they were declared."""

    plugins: dict[str, list[str]] = field(default_factory=dict)  # where → names

    def drop(self, requirements: list[str] | tuple[str, ...], where: str) -> list[str]:
        """`requirements` less the lint plugins, which are kept as left out of `where`."""
        left = [requirement_name(r) for r in requirements if is_lint_plugin(r)]
        if left:
            found = self.plugins.setdefault(where, [])
            found += [name for name in left if name not in found]
        return [r for r in requirements if not is_lint_plugin(r)]

    def keep(self, names: set[str]) -> None:
        """Those the setup installs after all (the pytest configuration needs them)."""
        for where in list(self.plugins):
            self.plugins[where] = [n for n in self.plugins[where] if n not in names]
            if not self.plugins[where]:
                del self.plugins[where]

    def note(self) -> str:
        """The setup note's clause ("" when nothing was left out)."""
        if not self.plugins:
            return ""
        parts = [f"{', '.join(names)} ({where})" for where, names in self.plugins.items()]
        return f"; left out: {'; '.join(parts)}: {WHY}"


def expanded(extras: dict[str, list[str]], extra: str, project: str,
             seen: frozenset[str] = frozenset()) -> list[str]:
    """An extra's requirements, with those naming the project's own extras
    (`p[test]`) replaced by those extras' requirements (each extra once: a cycle ends)."""
    found: list[str] = []
    seen = seen | {extra}
    for requirement in extras.get(extra, []):
        inner = _SELF_EXTRAS.match(requirement)
        if project and requirement_name(requirement) == project and inner:
            for name in (n.strip() for n in inner.group(1).split(",")):
                more = expanded(extras, name, project, seen) if name not in seen else []
                found += [r for r in more if r not in found]
        elif requirement not in found:
            found.append(requirement)
    return found


@dataclass(frozen=True)
class ExtrasSplit:
    """The test extras as installed: `whole` as `-e .[a,b]` (no lint plugin in them), the
    others' requirements but the plugins by name (`by_name`, from the extras `split`;
    an extra of lint plugins alone is in neither)."""

    whole: list[str]
    split: list[str]
    by_name: list[str]


def split_extras(extras: dict[str, list[str]], chosen: list[str], project: str,
                 left_out: LeftOut) -> ExtrasSplit:
    """Which chosen extras install whole, and what of the others installs by name."""
    whole: list[str] = []
    split: list[str] = []
    by_name: list[str] = []
    for extra in chosen:
        requirements = expanded(extras, extra, project)
        if not any(is_lint_plugin(r) for r in requirements):
            whole.append(extra)
            continue
        kept = left_out.drop(requirements, f"the `{extra}` extra")
        split += [extra] if kept else []
        by_name += [r for r in kept if r not in by_name]
    return ExtrasSplit(whole, split, by_name)
