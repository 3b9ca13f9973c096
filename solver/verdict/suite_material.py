"""Test material known by what the baseline's run collected and read, not by folder names.

pycodestyle keeps its suite in `testsuite/`: golden inputs (`testsuite/E26.py`) and a
helper (`testsuite/support.py`) that no `tests?/` pattern names, so a model could rewrite
an expectation and pass. The pytest guard (pytest_guard/) tells the host, from the
baseline, which modules the session collected, which doctest items, which files under
the tree the tests opened for reading, and which top-level modules are installed. From
that and the base tree:

- a folder holding a collected test module is test material, restored whole, unless it
  is a package of the project's code (a folder with `__init__.py` under a top-level
  package not named like tests, holding modules that are not tests);
- folders named testsuite, testing, testdata, fixtures, golden or snapshots count too,
  unless they are a subpackage (`pkg/testing/` of a library is its code);
- data files the tests opened outside the project's packages (golden files, fixtures, a
  README whose code blocks a test runs) are restored; data inside a package may be part
  of a real fix, so a change to one the tests read is flagged instead;
- doctest text files (`--doctest-glob`) are test files; a library module's doctest items
  are compared example by example (doctest_edits.py);
- a new top-level module may not take the name of a standard-library module or of an
  installed distribution's module (the tree's root comes first on `sys.path` and would
  shadow it: a top-level `xml/` emptied junitxml's report).
"""

from __future__ import annotations

import sys
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from solver.verdict.repo_tests import TestVerdict
from solver.verdict.suite_paths import (
    PACKAGING_FILES,
    SECTIONED_CONFIG,
    is_test_config,
    is_test_path,
)

# Folder names that hold tests' material in real projects besides tests/ and test/.
MATERIAL_NAMES = frozenset({"testsuite", "testing", "testdata", "fixtures", "golden",
                            "snapshots"})
CODE_SUFFIXES = (".py", ".pyi", ".pyc", ".pyd", ".so", ".pth")


@dataclass(frozen=True)
class TestMaterial:
    """What the verdict restores or watches beyond the test files named as such."""

    __test__ = False  # not a pytest test class
    folders: frozenset[str] = frozenset()  # restored whole
    files: frozenset[str] = frozenset()  # restored: opened data, doctest text files
    package_data: frozenset[str] = frozenset()  # read by the tests inside a package
    doctests: dict[str, list[str]] = field(default_factory=dict)  # module → item names
    taken_names: frozenset[str] = frozenset()  # a new top-level module must not use them

    def holds(self, path: str) -> bool:
        return path in self.files or _under(path, self.folders)


def _folders(path: str) -> list[str]:
    """The folders above `path`, outermost first."""
    parts = PurePosixPath(path).parts[:-1]
    return ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]


def _top_package(folder: str) -> str:
    parts = folder.split("/")
    return parts[1] if parts[0] == "src" and len(parts) > 1 else parts[0]


def _test_named(name: str) -> bool:
    return name in MATERIAL_NAMES or is_test_path(name + "/")


def _library(folder: str, base: set[str], by_folder: dict[str, list[str]],
             collected: set[str], doctest_files: set[str]) -> bool:
    """Whether `folder` holds the project's own code (so it is never restored whole)."""
    if folder in ("", "src"):
        return True
    files = by_folder.get(folder, [])
    if any(p in doctest_files for p in files):
        return True
    if f"{folder}/__init__.py" not in base or _test_named(_top_package(folder)):
        return False
    return any(p.endswith(".py") and p not in collected and not is_test_path(p)
               and PurePosixPath(p).name not in ("__init__.py", "conftest.py")
               for p in files)


def _under(path: str, folders: AbstractSet[str]) -> bool:
    return any(folder in folders for folder in _folders(path))


def _named_folders(base: set[str]) -> set[str]:
    """testsuite/, fixtures/, … anywhere, unless a package's subpackage."""
    found = set()
    for path in base:
        for folder in _folders(path):
            name = folder.rsplit("/", 1)[-1]
            parent = folder.rsplit("/", 1)[0] if "/" in folder else ""
            if name in MATERIAL_NAMES and not (parent and f"{parent}/__init__.py" in base
                                               and f"{folder}/__init__.py" in base):
                found.add(folder)
    return found


def _doctest_items(baseline: TestVerdict, guard: dict[str, list[str]]) -> list[str]:
    """The baseline's doctest item ids: the guard's word, else ids from non-test files."""
    if "doctests" in guard:
        return guard["doctests"]
    return [t for t in baseline.tests if "::" in t and not is_test_path(t.split("::")[0])
            and t.split("::")[0].endswith(".py") and "::" not in t.split("::", 1)[1]]


def _opened(guard: dict[str, list[str]], base: set[str], code_dirs: set[str]
            ) -> tuple[set[str], set[str]]:
    """(files to restore, package data to flag) among the data files the tests read."""
    restore, package_data = set(), set()
    for path in guard.get("opened", []):
        name = PurePosixPath(path).name
        if path not in base or path.endswith(CODE_SUFFIXES) or is_test_path(path) \
                or is_test_config(path) or name in PACKAGING_FILES | SECTIONED_CONFIG:
            continue
        if any(folder in code_dirs for folder in _folders(path)):
            package_data.add(path)
        else:
            restore.add(path)
    return restore, package_data


def material_from(baseline: TestVerdict, base_paths: list[str]) -> TestMaterial:
    """What the baseline's run says is test material, on the base tree's paths."""
    guard = baseline.guard or {}
    base = set(base_paths)
    items = _doctest_items(baseline, guard)
    doctests: dict[str, list[str]] = {}
    text_files = set()
    for item in items:
        path, _, name = item.partition("::")
        if path.endswith(".py"):
            doctests.setdefault(path, []).append(name)
        else:
            text_files.add(path)
    collected = set(guard.get("test_modules", [])) or \
        {t.split("::")[0] for t in baseline.tests if t.split("::")[0].endswith(".py")
         and is_test_path(t.split("::")[0])}
    by_folder: dict[str, list[str]] = {}
    for path in base:
        by_folder.setdefault(path.rsplit("/", 1)[0] if "/" in path else "", []).append(path)
    folders = {f for f in (p.rsplit("/", 1)[0] for p in collected if "/" in p)
               if not _library(f, base, by_folder, collected, set(doctests))}
    folders |= _named_folders(base)
    code_dirs = {p.rsplit("/", 1)[0] for p in base if "/" in p and p.endswith(".py")
                 and not is_test_path(p) and not _under(p, folders)}
    restore, package_data = _opened(guard, base, code_dirs)
    own = {PurePosixPath(p).parts[0 if not p.startswith("src/") else 1].split(".")[0]
           for p in base if "/" in p or p.endswith(".py")}
    taken = (set(sys.stdlib_module_names) | set(guard.get("top_level", []))) - own
    return TestMaterial(folders=frozenset(folders),
                        files=frozenset(restore | (text_files & base)),
                        package_data=frozenset(package_data - restore),
                        doctests={p: n for p, n in doctests.items() if not is_test_path(p)},
                        taken_names=frozenset(taken))
