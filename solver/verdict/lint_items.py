"""Test items that are lint, type and format checks, and the verdict's rule for them
(issue 29 §1).

A lint plugin (solver/setup/lint_plugins.py) adds one item per file it checks:
`pkg/mod.py::ruff`, `pkg/mod.py::ruff::format` (pytest-ruff), `pkg/mod.py::mypy` and one
`…::mypy-status` (pytest-mypy), `pkg/mod.py::flake-8::FLAKE8` (pytest-flake8),
`…::black`, `…::ISORT`, `…::PYLINT`, `…::PYCODESTYLE`, `…::PYDOCSTYLE`, and
pytest-checkdocs' `.::project`. Its failure is a finding of the checker, not of what the
code does. The inferred setup leaves these plugins out; they still run where a project's
configuration turns one on (`addopts = --ruff`) or its `setup:` installs them. Then:

- failing on the base and still failing with the change: the same finding, not the
  change's. It is set aside as a failure before and after is (verdict.excuse: the same
  in both baseline runs, else flaky) but needs no evidence, because a lint finding says
  nothing about the issue; the trace of the code a test runs does not apply (a checker
  reads files, it runs none of them). Where the change edits the file such an item
  checks, the run cannot tell whether the change added findings to it (one item, one
  status, per file): the reviewer is told, never silently.
- passing on the base and failing with the change: the change's own finding, counted as
  any new failure (the project's check fails on it as it would in the project's CI).
- failing on the base and passing with the change: a finding fixed, never evidence that
  the issue is.
"""

from __future__ import annotations

import re

BAD = ("failed", "error")
# What follows the checked file in an item's id.
_ITEM = re.compile(r"::(ruff|ruff::format|mypy|mypy-status|black|flake-8::FLAKE[8S]|FLAKE8"
                   r"|ISORT|PYLINT|PYCODESTYLE|PYDOCSTYLE)$")
# pytest-checkdocs' item: the project's metadata, under its root or a packaging file.
_CHECKDOCS = re.compile(r"^(\.|pyproject\.toml|setup\.py|setup\.cfg)::project$")
# The packaging files pytest-checkdocs reads, as the file it checks.
METADATA = ("pyproject.toml", "setup.py", "setup.cfg", "README.rst", "README.md", "README")


def is_lint_item(test: str) -> bool:
    return bool(_ITEM.search(test) or _CHECKDOCS.match(test))


def checked_files(test: str) -> frozenset[str]:
    """The files a lint item's finding is about, as paths of the tree: its own, spelled
    as a path (`pkg/mod.py`) or, for a stub, dotted (`pkg.mod.pyi`); the packaging
    files for checkdocs."""
    if _CHECKDOCS.match(test):
        return frozenset(METADATA)
    found = _ITEM.search(test)
    if found is None:
        return frozenset()
    file = test[:found.start()]
    stem, dot, suffix = file.rpartition(".")
    dotted = stem.replace(".", "/") + dot + suffix if dot and "/" not in file else file
    return frozenset({file, dotted})


def lint_failing(baseline: dict[str, str], final: dict[str, str]) -> list[str]:
    """The lint items that fail on the base and still fail with the change."""
    return sorted(test for test, status in baseline.items()
                  if status in BAD and final.get(test) in BAD and is_lint_item(test))


def _finding(summary: str) -> str:
    """A failure summary (one line: junit_report.failure_summary) without its source
    excerpt (ruff's ` --> file:line:col`, ` | `) and numbers (a change above a finding
    moves it): what the first finding is."""
    head = re.split(r"\s-->\s|\s\|\s", summary, maxsplit=1)[0]
    return re.sub(r"\d+", "#", head).strip()


def edited_lint_flags(same: list[str], edited: tuple[str, ...],
                      before: dict[str, str], after: dict[str, str]) -> list[str]:
    """For the reviewer: the lint items failing before and after whose file the change
    edits; `before` and `after` are the runs' failure summaries (their text is the
    project's and the change's, so only whether they read alike is said)."""
    flags = []
    for test in same:
        files = sorted(checked_files(test) & set(edited))
        if not files:
            continue
        alike = _finding(before.get(test, "")) == _finding(after.get(test, ""))
        flags.append(
            f"the lint or type check {test} fails on the base and with the change, which "
            f"edits {', '.join(files)}: one item per file cannot tell whether the change "
            "adds findings there (its first finding reads "
            + ("the same" if alike else "differently") + " with the change); read its "
            "findings before merging")
    return flags
