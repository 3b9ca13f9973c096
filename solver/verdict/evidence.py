"""What shows that a change does what the issue asks: per test, how it ends on the base
code and with the change (issue 28 §1).

A test *reproduces* the issue when it fails on the base code (at an assertion, or at an
exception raised inside code the base has) and passes with the change. One that fails on
the base only because it imports or calls a name the change adds shows a *new feature*,
not a fix. One that passes on the base too shows nothing; one that fails with the change
is the change's failure. Pure data: the verdict (verdict.py) fills it, the PR body, the
run page and `solve`'s output render it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

from solver.verdict.lint_items import is_lint_item
from solver.verdict.repo_tests import TestVerdict

REPRODUCES = "reproduces"
NEW_FEATURE = "new_feature"
PASSES_ON_BASE = "passes_on_base"
FAILS_WITH_CHANGE = "fails_with_change"
KINDS = (REPRODUCES, NEW_FEATURE, PASSES_ON_BASE, FAILS_WITH_CHANGE)

REPOSITORY = "repository"  # a repository test that failed at baseline and passes now
MODEL = "model"  # a new or changed test of the model's, run against the base tree
SOURCES = (REPOSITORY, MODEL)
BAD = ("failed", "error")

# What an old run record's bare test id meant: a test that failed on the base code and
# passed with the change (the only evidence recorded then).
_OLD_RECORD_ON_BASE = "failed"


@dataclass(frozen=True)
class TestEvidence:
    """One test's evidence: its node id, what it shows (`kind`), whose test it is
    (`source`) and how it ended on the base code, in a short plain phrase (`on_base`)."""

    __test__ = False  # not a pytest test class

    test: str
    kind: str
    source: str
    on_base: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown evidence kind: {self.kind!r}")
        if self.source not in SOURCES:
            raise ValueError(f"unknown evidence source: {self.source!r}")

    @property
    def reproduces(self) -> bool:
        return self.kind == REPRODUCES

    def to_dict(self) -> dict[str, str]:
        return {"test": self.test, "kind": self.kind, "source": self.source,
                "on_base": self.on_base}

    @classmethod
    def from_dict(cls, data: object) -> TestEvidence:
        """From `to_dict`'s mapping, or from a bare test id: how run records before
        issue 28 stored evidence (a test that reproduced; whose, they did not say)."""
        if isinstance(data, str):
            return cls(data, REPRODUCES, REPOSITORY, _OLD_RECORD_ON_BASE)
        if not isinstance(data, dict) or not isinstance(data.get("test"), str):
            raise ValueError(f"not a test's evidence: {data!r:.200}")
        return cls(data["test"], str(data.get("kind", REPRODUCES)),
                   str(data.get("source", REPOSITORY)), str(data.get("on_base", "")))


def reproducing(evidence: list[TestEvidence]) -> list[str]:
    """The ids of the tests that reproduce the issue, in order."""
    return [entry.test for entry in evidence if entry.reproduces]


# --- Telling a fix from a new feature --------------------------------------------------

# The failures that only say a name is missing, and where their message names it.
_MISSING_NAME = {
    "ImportError": re.compile(r"cannot import name '([^']+)'|No module named '([^']+)'"),
    "ModuleNotFoundError": re.compile(r"No module named '([^']+)'"),
    "AttributeError": re.compile(r"has no attribute '([^']+)'"),
    "NameError": re.compile(r"name '([^']+)' is not defined"),
}
_EXCEPTION_NAME = re.compile(r"[A-Za-z_][\w.]*(Error|Exception|Warning|Exit|Interrupt|"
                             r"Iteration)")
MAX_PARSED_FILES = 500  # the change's Python files read for the names they define
MAX_PARSED_BYTES = 2 * 1024 * 1024  # a larger file is not parsed (its names not known)


def missing_name(summary: str) -> tuple[str, str] | None:
    """(exception type, the name it says is missing) of a failure summary
    ("AttributeError: module 'toolz' has no attribute 'tail'" → ("AttributeError",
    "tail")), or None when the failure is about something else."""
    kind, _, message = summary.partition(":")
    pattern = _MISSING_NAME.get(kind.strip().rsplit(".", 1)[-1])
    found = pattern.search(message) if pattern else None
    if found is None:
        return None
    return kind.strip().rsplit(".", 1)[-1], next(g for g in found.groups() if g)


def _defined(tree: ast.AST) -> set[str]:
    """The names a module defines: functions, classes, assigned names and attributes
    (`self.x = …`), and what its imports bind."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _names_in(data: bytes | None) -> set[str] | None:
    """The names a file's source defines; None when it cannot be read as Python."""
    if data is None or len(data) > MAX_PARSED_BYTES:
        return None
    try:
        return _defined(ast.parse(data))
    except (SyntaxError, ValueError):
        return None


def module_names(path: str) -> set[str]:
    """Every dotted name a module file may be imported by: `src/pkg/mod.py` → `mod`,
    `pkg.mod`, `src.pkg.mod` (the layout decides which one works)."""
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return {".".join(parts[i:]) for i in range(len(parts))} if parts else set()


def names_added(paths: list[str], read_base: Callable[[str], bytes | None],
                read_change: Callable[[str], bytes | None]) -> frozenset[str]:
    """The names that the change's code (`paths`: its non-test Python files) defines and
    the base's same files do not, with the module names of the files it adds."""
    before: set[str] = set()
    after: set[str] = set()
    for path in paths[:MAX_PARSED_FILES]:
        old, new = read_base(path), read_change(path)
        before |= _names_in(old) or set()
        after |= _names_in(new) or set()
        if old is None and new is not None:
            after |= module_names(path)
    return frozenset(after - before)


def on_base_phrase(status: str | None, summary: str, new_names: frozenset[str]
                   ) -> tuple[bool, str]:
    """(failed on the base only for a name the change adds, how it ended there)."""
    if status == "passed":
        return False, "passed"
    if status not in ("failed", "error"):
        return False, f"did not run ({status or 'not collected'})"
    missing = missing_name(summary)
    if missing is not None and missing[1] in new_names:
        return True, f"{missing[0]} on a name the change adds ({missing[1][:80]})"
    kind = summary.partition(":")[0].strip()
    if kind == "AssertionError":
        return False, "failed at an assertion"
    # A report that names no exception (the unittest runner's) says only that it failed.
    return False, f"raised {kind[:80]}" if _EXCEPTION_NAME.fullmatch(kind) else "failed"


def classify(test: str, with_change: str, on_base: TestVerdict, source: str,
             new_names: frozenset[str]) -> TestEvidence | None:
    """One test, by how it ended on the base code (`on_base`: its own status, or its
    module's collection error) and with the change; None when it did not run with it."""
    status, summary = on_base.tests.get(test), on_base.failures.get(test, "")
    module = test.split("::")[0]
    if status is None and on_base.tests.get(module) in BAD:
        status, summary = on_base.tests[module], on_base.failures.get(module, "")
    feature, phrase = on_base_phrase(status, summary, new_names)
    if with_change in BAD:
        return TestEvidence(test, FAILS_WITH_CHANGE, source, phrase)
    if with_change != "passed":
        return None
    if status not in BAD:
        return TestEvidence(test, PASSES_ON_BASE, source, phrase)
    return TestEvidence(test, NEW_FEATURE if feature else REPRODUCES, source, phrase)


def model_evidence(model_tests: dict[str, str], on_base: TestVerdict,
                   new_names: frozenset[str]) -> list[TestEvidence]:
    """The model's new and changed tests (id → status with the change), each classified
    by its run against the base tree."""
    found = (classify(test, status, on_base, MODEL, new_names)
             for test, status in sorted(model_tests.items()))
    return [entry for entry in found if entry is not None]


def repository_evidence(baseline: TestVerdict, second: TestVerdict | None,
                        final: TestVerdict, new_names: frozenset[str]
                        ) -> list[TestEvidence]:
    """The repository's tests that failed at baseline (and in the second baseline run,
    where one ran: one that flipped is flaky, never evidence) and pass on the change; a
    lint or type check's finding fixed is none (lint_items.py)."""
    found = []
    for test, status in sorted(baseline.tests.items()):
        if status in BAD and final.tests.get(test) == "passed" \
                and (second is None or second.tests.get(test) in BAD) \
                and not is_lint_item(test):
            entry = classify(test, "passed", baseline, REPOSITORY, new_names)
            if entry is not None:
                found.append(entry)
    return found


def changed_test_functions(before: bytes | None, after: bytes | None) -> set[str]:
    """The test functions and methods (`test_x`, `TestK::test_x`) that a test file's new
    version adds or changes; every one in it when the old version cannot be read."""
    def functions(data: bytes | None) -> dict[str, str]:
        if data is None or len(data) > MAX_PARSED_BYTES:
            return {}
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError):
            return {}
        found: dict[str, str] = {}
        for node in tree.body:
            for inner, prefix in ([(n, node.name + "::") for n in node.body]
                                  if isinstance(node, ast.ClassDef) else [(node, "")]):
                if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[prefix + inner.name] = ast.dump(inner)
        return found
    old, new = functions(before), functions(after)
    return {name for name, body in new.items() if old.get(name) != body}


def changed_tests(test_ids: list[str], changed: dict[str, set[str]]) -> list[str]:
    """The ids among `test_ids` whose function the model changed (`changed`: test file →
    `changed_test_functions`); a parametrised id by its function."""
    found = []
    for test in test_ids:
        path, _, name = test.partition("::")
        if name and name.split("[", 1)[0] in changed.get(path, set()):
            found.append(test)
    return found
