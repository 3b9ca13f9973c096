"""Which paths are the repository's tests and test configuration, and what the verdict
run restores of them from the base commit.

The verdict runs the model's change to the code against the repository's *original*
tests: every changed path that is a test file or test configuration is put back as it is
at the base commit (or removed, when the model added it). `pyproject.toml` and
`setup.cfg` carry other settings the change may legitimately edit: the verdict takes them
as the change has them with the base's pytest section put back (config_sections.py).
The model's own tests run with the model's test configuration (its conftest.py, the
marker it registered): they are shown, never counted for the repository's tests.
"""

from __future__ import annotations

import importlib.machinery
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from solver.verdict.config_sections import pytest_section, swap_section
from solver.verdict.doctest_edits import compare as compare_doctests
from solver.verdict.tamper_scan import scan

if TYPE_CHECKING:
    from solver.verdict.suite_material import TestMaterial

# Tests by path: a tests/ or test/ folder anywhere, test_*.py, *_test.go, *.test.js, …,
# and unittest modules named `test.py` or `tests.py` (repo_tests.py runs `test.py`).
TEST_PATH = re.compile(r"(^|/)(tests?/|test_[^/]*$|[^/]*_tests?\.\w+$|tests?\.py$|"
                       r"[^/]*\.test\.\w+$|[^/]*\.spec\.\w+$|__tests__/)")
# Files that configure how tests are found and run, at any level of the tree.
TEST_CONFIG_NAMES = frozenset({
    "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
    "noxfile.py",
    # Django's runner scripts (django_tests.py): they choose and set up the tests.
    "runtests.py", "manage.py",
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
    # A pyproject.toml or setup.cfg whose pytest section changed: the change's file with
    # the base's section (config_sections.py).
    restored_files: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # The model's own tests run with its test configuration, against the base tree too:
    # these paths as the change has them (its test files, conftest.py, pytest.ini, …), and
    # these files written (the base's pyproject.toml or setup.cfg, the change's section).
    model_files: list[str] = field(default_factory=list)
    on_base_files: dict[str, bytes] = field(default_factory=dict)

    def model_test_files(self) -> list[str]:
        """The model's test files and edited doctests: not its test configuration."""
        return [p for p in self.model_tests if not is_test_config(p)
                and PurePosixPath(p).name not in SECTIONED_CONFIG]


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
            plan.model_files.append(path)
        elif is_test_path(path) or (material is not None and material.holds(path)):
            plan.restore.append(path)
            plan.model_tests.append(path)
            plan.model_files.append(path)
            if base is None and read_candidate(path) is not None:
                plan.new_test_files.append(path)
        elif name in SECTIONED_CONFIG:
            _section_edit(plan, path, base, read_candidate(path))
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
    """Why a change to a path that is not test material is refused, if it is: a module
    shadowing the runner, a start-up hook, or packaging metadata in the tree."""
    name = PurePosixPath(path).name
    if base is None and (module := shadows_runner(path, taken)):
        return f"the change adds {path}, which would shadow `{module}` when the tests run"
    if name in START_UP_NAMES:
        return (f"the change adds or edits {path}: Python runs a {name} at start-up from "
                "any folder on its path, before the tests")
    if METADATA_DIR.search(path) or name == "entry_points.txt":
        return (f"the change adds packaging metadata ({path}): importlib.metadata reads it "
                "from the tree, and an entry point there is a plugin pytest loads")
    return None


def _section_edit(plan: TreePlan, path: str, base: bytes | None,
                  candidate: bytes | None) -> None:
    """A change to the pytest section of a pyproject.toml or setup.cfg: the verdict takes
    the change's file with the base's section, the model's tests on the base tree the
    base's file with the change's section; when the text cannot be cut there, the whole
    file (the base's for the verdict, the change's for the model's tests)."""
    name = PurePosixPath(path).name
    before, after = pytest_section(name, _text(base)), pytest_section(name, _text(candidate))
    if before == after:
        return
    plan.model_tests.append(path)  # shown as an edit of the test configuration
    section = "[tool.pytest]" if name == "pyproject.toml" else "[tool:pytest]"
    verdict_file = swap_section(name, candidate, base)
    if verdict_file is None:
        plan.restore.append(path)
        plan.notes.append(f"the change edits the pytest configuration ({section} in {path}) "
                          "and the section could not be put back alone: the repository's "
                          "tests ran with the whole file as the base has it")
    else:
        plan.restored_files[path] = verdict_file
    on_base = swap_section(name, base, candidate)
    if on_base is None:
        plan.model_files.append(path)
    else:
        plan.on_base_files[path] = on_base
    changed = _changed_settings(before, after)
    if changed is None:
        plan.notes.append(f"the change registers pytest markers in {path} ({section}); the "
                          "model's own tests ran with them, the repository's tests with the "
                          "base's configuration")
        return
    plan.flags.append(f"the change edits the pytest configuration ({section} in {path}: "
                      f"{changed}): the repository's tests ran with the base's, the model's "
                      "own tests with the change's; merged, it changes how the "
                      "repository's tests run")


def _settings(section: object, prefix: str = "") -> dict[str, object]:
    """A parsed pytest section as setting → value (`ini_options.addopts`, `markers`)."""
    if not isinstance(section, dict):
        return {} if section is None else {"(the whole section, unreadable)": section}
    flat: dict[str, object] = {}
    for key, value in section.items():
        if isinstance(value, dict):
            flat.update(_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _entries(value: object) -> set[str]:
    """A setting's entries: a TOML list's items, an INI value's lines."""
    items = value if isinstance(value, list) else str(value or "").splitlines()
    return {str(item).strip() for item in items} - {""}


def _changed_settings(before: object, after: object) -> str | None:
    """The settings a pytest section edit changes, named; None when it only registers
    markers in a section the base has (adds to `markers`, which changes no test's run; a
    new section would make this file pytest's configuration instead of another one)."""
    old, new = _settings(before), _settings(after)
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if isinstance(before, dict) and isinstance(after, dict) and changed and all(
            k.rpartition(".")[2] == "markers" and _entries(old.get(k)) <= _entries(new.get(k))
            for k in changed):
        return None
    if before is None or after is None:
        changed = ["the section " + ("added" if before is None else "removed"), *changed]
    shown = [k if len(k) <= 40 else k[:39] + "…" for k in changed[:5]]
    return ", ".join(shown) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")


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
