"""Which paths are the repository's tests and test configuration, and what the verdict
run restores of them from the base commit.

The verdict runs the model's change to the code against the repository's *original*
tests: every changed path that is a test file or test configuration is put back as it is
at the base commit (or removed, when the model added it). `pyproject.toml` and
`setup.cfg` carry other settings the change may legitimately edit, so they are kept, and
a change to their pytest section is refused with a reason instead.
"""

from __future__ import annotations

import configparser
import importlib.machinery
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from solver.verdict.doctest_edits import compare as compare_doctests
from solver.verdict.tamper_scan import scan

if TYPE_CHECKING:
    from solver.verdict.suite_material import TestMaterial

# Tests by path: a tests/ or test/ folder anywhere, test_*.py, *_test.go, *.test.js, ….
TEST_PATH = re.compile(r"(^|/)(tests?/|test_[^/]*$|[^/]*_tests?\.\w+$|"
                       r"[^/]*\.test\.\w+$|[^/]*\.spec\.\w+$|__tests__/)")
# Files that configure how tests are found and run, at any level of the tree.
TEST_CONFIG_NAMES = frozenset({
    "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
    "noxfile.py",
    "jest.config.js", "jest.config.ts", "jest.config.cjs", "jest.config.mjs",
    "vitest.config.ts", "vitest.config.js", ".mocharc.js", ".mocharc.json", ".mocharc.yml",
})
# Files whose pytest section matters but which hold other settings too.
SECTIONED_CONFIG = frozenset({"pyproject.toml", "setup.cfg"})
# Module names a file at the top of the tree would shadow when tests run with
# `python -m pytest` (the working directory comes first on sys.path).
SHADOWING_MODULES = frozenset({"pytest", "_pytest", "py", "pluggy", "iniconfig",
                               "sitecustomize", "usercustomize", "unittest", "tox", "nox",
                               "frognano_verdict_guard"})
# Run at interpreter start from any folder on sys.path (src/ of an editable install).
START_UP_NAMES = frozenset({"sitecustomize.py", "usercustomize.py"})
# Packaging metadata importlib.metadata reads from any folder on sys.path: an entry point
# there (`pytest11`) is a plugin every pytest run loads.
METADATA_DIR = re.compile(r"(^|/)[^/]+\.(dist-info|egg-info)/")
PACKAGING_FILES = frozenset({"pyproject.toml", "setup.cfg", "setup.py"})


def is_test_path(path: str) -> bool:
    return bool(TEST_PATH.search(path))


def is_test_config(path: str) -> bool:
    return PurePosixPath(path).name in TEST_CONFIG_NAMES


def pytest_section(name: str, text: str) -> object:
    """The pytest settings a pyproject.toml or setup.cfg holds, parsed (None: none);
    an unreadable file reads as its raw text, so any edit to it counts as a change."""
    if name == "pyproject.toml":
        try:
            return tomllib.loads(text).get("tool", {}).get("pytest")
        except tomllib.TOMLDecodeError:
            return text
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return text
    return dict(parser["tool:pytest"]) if parser.has_section("tool:pytest") else None


def _top_level_module(path: str) -> str | None:
    """The module a top-level file or package's `__init__` makes importable, if any."""
    parts = PurePosixPath(path).parts
    name = parts[-1]
    if not (len(parts) == 1 or (len(parts) == 2 and name.startswith("__init__."))):
        return None
    # Longest first: `x.cpython-311-x86_64-linux-gnu.so` before `.so`.
    for suffix in sorted(importlib.machinery.all_suffixes(), key=len, reverse=True):
        if name.endswith(suffix):
            return parts[0] if len(parts) == 2 else name[:-len(suffix)]
    return None


def shadows_runner(path: str, taken: frozenset[str] = frozenset()) -> str | None:
    """The module a new top-level module or package would shadow, if any: the test
    runner's own, or one of `taken` (the standard library's and the installed
    distributions' top-level modules, test_material.py)."""
    stem = _top_level_module(path)
    return stem if stem in SHADOWING_MODULES or stem in taken else None


@dataclass
class TreePlan:
    """What the verdict run takes from the base commit, and what it refuses outright."""

    restore: list[str] = field(default_factory=list)  # back to the base (or removed)
    model_tests: list[str] = field(default_factory=list)  # the model's test files, shown
    new_test_files: list[str] = field(default_factory=list)  # ones the base did not have
    refusals: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # said loudly, not refused
    # Library files whose doctest examples the change edited: the verdict runs them with
    # the original docstrings back (doctest_edits.py), and how that was decided.
    restored_files: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


def plan_verdict_tree(changed: list[str], read_base: Callable[[str], bytes | None],
                      read_candidate: Callable[[str], bytes | None],
                      material: TestMaterial | None = None) -> TreePlan:
    """Sort the change's paths: restored for the verdict, shown, or refused. `material`
    is what the baseline's run says is test material beyond the names (test_material)."""
    plan = TreePlan()
    taken = material.taken_names if material else frozenset()
    for path in sorted(set(changed)):
        name = PurePosixPath(path).name
        base = read_base(path)
        if is_test_config(path):
            plan.restore.append(path)
            plan.model_tests.append(path)
        elif is_test_path(path) or (material is not None and material.holds(path)):
            plan.restore.append(path)
            plan.model_tests.append(path)
            if base is None and read_candidate(path) is not None:
                plan.new_test_files.append(path)
        elif refusal := _refusal(path, base, read_candidate, taken):
            plan.refusals.append(refusal)
        if name in PACKAGING_FILES and (_text(read_candidate(path)).count("pytest11")
                                        > _text(base).count("pytest11")):
            plan.refusals.append(f"the change adds a pytest11 entry point in {path}: a "
                                 "pytest plugin that every test run with the package "
                                 "installed would load")
        if not (is_test_config(path) or is_test_path(path)
                or (material is not None and material.holds(path))):
            refusals, flags = scan(path, read_base, read_candidate)
            plan.refusals += refusals
            plan.flags += flags
            if material is not None:
                _library_tests(plan, path, base, read_candidate, material)
    return plan


def _refusal(path: str, base: bytes | None, read_candidate: Callable[[str], bytes | None],
             taken: frozenset[str]) -> str | None:
    """Why a change to a path that is not test material is refused, if it is: the pytest
    section of a shared config, a module shadowing the runner, a start-up hook, or
    packaging metadata in the tree."""
    name = PurePosixPath(path).name
    if name in SECTIONED_CONFIG:
        before = pytest_section(name, _text(base))
        after = pytest_section(name, _text(read_candidate(path)))
        if before == after:
            return None
        section = "[tool.pytest]" if name == "pyproject.toml" else "[tool:pytest]"
        return (f"the change edits the pytest configuration ({section} in {path}); the "
                "verdict uses the repository's own test configuration: leave it as it is")
    if base is None and (module := shadows_runner(path, taken)):
        return f"the change adds {path}, which would shadow `{module}` when the tests run"
    if name in START_UP_NAMES:
        return (f"the change adds or edits {path}: Python runs a {name} at start-up from "
                "any folder on its path, before the tests")
    if METADATA_DIR.search(path) or name == "entry_points.txt":
        return (f"the change adds packaging metadata ({path}): importlib.metadata reads it "
                "from the tree, and an entry point there is a plugin pytest loads")
    return None


def _library_tests(plan: TreePlan, path: str, base: bytes | None,
                   read_candidate: Callable[[str], bytes | None],
                   material: TestMaterial) -> None:
    """A library file's part in the tests: its doctests, or data the tests read."""
    if path in material.package_data:
        plan.flags.append(f"the change edits {path}, package data the repository's tests "
                          "read: check that the edit is part of the fix")
    names = material.doctests.get(path)
    candidate = read_candidate(path)
    if not names or base is None or candidate is None:
        return
    edit = compare_doctests(path, base, candidate, names)
    if edit.added:
        plan.notes.append(f"the change adds {edit.added} doctest example(s) to {path}; "
                          "they ran with the original examples")
    if not edit.edited:
        return
    plan.model_tests.append(path)
    shown = ", ".join(edit.edited[:5]) + (", …" if len(edit.edited) > 5 else "")
    if edit.problem or edit.restored is None:
        plan.refusals.append(f"the change edits the doctest examples of {shown} in {path} "
                             f"and {edit.problem or 'they could not be put back'}")
        return
    plan.restored_files[path] = edit.restored
    plan.notes.append(f"the change edits doctest examples in {path} ({shown}); the "
                      "verdict ran the repository's original examples against the new code")
