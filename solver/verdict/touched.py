"""Does a change touch the code a failing test runs? Measured, not guessed (issue 28 §1).

A test that fails before and after a change is excused as pre-existing (verdict.excuse)
only when the change does not edit the code that test runs. The second baseline run
(VerdictRunner.second_baseline) asks the harness's pytest guard, through a file in its
host-owned channel folder, to trace the tests that failed at baseline: the lines of the
tree each one executes on the base, from its setup to its teardown. Here the host meets
that trace with the base-side lines the change edits (git's diff of each traced file
between the base and the verdict's tree: the lines removed or replaced; for a pure
insertion, the lines on either side). A failing test whose traced lines meet them is
*touched*: it is the issue's test, still failing, and is never excused. The trace is of
the base tree, which the change cannot alter.

Bounded: at most MAX_TRACED tests are traced (the guard bounds each test's lines and
files too); a test past a bound counts as touched, and the verdict says so. A runner the
guard does not load (unittest, make, tox without pytest) gives no trace: the old rule
holds and the verdict flags it as not measured, as it does for a test that started a
process (the trace follows no subprocess). What the trace does not see: lines run at
import (a module constant, a default argument) run during collection, not during the
test, so a change to them alone does not make the test touched.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from solver.hostgit import GitError, HostRepo, run_git
from solver.verdict.repo_tests import TestVerdict

# The guard reads the ids to trace from this file beside its report (pytest_guard/).
TRACE_REQUEST = "frognano-trace.json"
MAX_TRACED = 300  # tests a run traces; the guard keeps the same bound
BAD = ("failed", "error")
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", re.MULTILINE)
WHOLE_FILE = None  # edited lines of a file deleted or changed as binary: all of them


@dataclass(frozen=True)
class Touched:
    """What the trace says of the baseline's failing tests against one change."""

    tests: frozenset[str] = frozenset()  # the change edits lines they run (or past a bound)
    capped: frozenset[str] = frozenset()  # of those: counted touched, the trace past a bound
    unmeasured: frozenset[str] = frozenset()  # no trace of them could be made


@dataclass(frozen=True)
class Trace:
    """The guard's trace: test id → file → lines run; the tests it traced, and those
    whose trace went past its bound."""

    lines: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    traced: frozenset[str] = frozenset()
    capped: frozenset[str] = frozenset()
    blind: frozenset[str] = frozenset()  # started a process, whose lines are not traced


def trace_request(baseline: TestVerdict) -> list[str]:
    """The tests the second baseline run traces: those that failed at baseline."""
    return sorted(t for t, s in baseline.tests.items() if s in BAD)[:MAX_TRACED]


def write_trace_request(channel: Path, tests: list[str]) -> None:
    """The request, in the run's channel folder (host-owned, bound read-only)."""
    path = channel / TRACE_REQUEST
    path.write_text(json.dumps(tests), encoding="utf-8")
    path.chmod(0o644)  # the sandbox's uid reads it


def _lines(ranges: str) -> frozenset[int]:
    """"3-5,9" → {3, 4, 5, 9}; a malformed part is dropped."""
    found: set[int] = set()
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            start, end = int(first), int(last or first)
            found.update(range(start, min(end, start + 100_000) + 1))
    return frozenset(found)


def read_trace(guard: dict[str, list[str]] | None) -> Trace | None:
    """The trace in a run's guard findings; None when the guard made none (not loaded,
    or not asked)."""
    if guard is None or "trace_tests" not in guard:
        return None
    lines: dict[str, dict[str, frozenset[int]]] = {}
    for entry in guard.get("traced", []):
        parts = entry.split("\x1f")
        if len(parts) == 3:
            lines.setdefault(parts[0], {})[parts[1]] = _lines(parts[2])
    return Trace(lines, frozenset(guard["trace_tests"]),
                 frozenset(guard.get("trace_capped", [])),
                 frozenset(guard.get("trace_blind", [])))


def hunk_lines(patch: bytes) -> frozenset[int] | None:
    """The base-side lines a `git diff -U0` patch edits: removed or replaced lines, and
    for a pure insertion after line n, lines n and n + 1. A binary diff: WHOLE_FILE."""
    if b"\nBinary files " in b"\n" + patch:
        return WHOLE_FILE
    edited: set[int] = set()
    for match in _HUNK.finditer(patch):
        start = int(match.group(1))
        count = int(match.group(2)) if match.group(2) is not None else 1
        edited.update(range(start, start + count) if count else (start, start + 1))
    return frozenset(edited)


def edited_lines(repo: HostRepo, old: str, new: str, paths: set[str]
                 ) -> dict[str, frozenset[int] | None]:
    """For each of `paths` the change edits between trees `old` and `new`: the lines of
    its `old` version it edits (WHOLE_FILE: deleted, binary, or unreadable)."""
    edited: dict[str, frozenset[int] | None] = {}
    for path, _mode, after, before in repo.tree_changes(old, new):
        if path not in paths or before is None:
            continue  # an added file has no base lines a test could have run
        if after is None:
            edited[path] = WHOLE_FILE
            continue
        try:
            edited[path] = hunk_lines(run_git(
                "diff", "-U0", "--no-color", "--no-ext-diff", "--no-textconv", before,
                after, git_dir=repo.git_dir, strip=False))
        except GitError:
            edited[path] = WHOLE_FILE  # counted as touched: never excused by an error
    return edited


def _meets(ran: dict[str, frozenset[int]],
           edited: dict[str, frozenset[int] | None]) -> bool:
    return any(path in edited and (edited[path] is WHOLE_FILE
                                   or not lines.isdisjoint(edited[path] or ()))
               for path, lines in ran.items())


def touched_tests(baseline: TestVerdict, second: TestVerdict, repo: HostRepo,
                  old: str, new: str) -> Touched:
    """The baseline failures whose lines, traced in `second` (a run of tree `old`), tree
    `new` edits; those past a bound count as touched; those with no trace, unmeasured."""
    failing = {t for t, s in baseline.tests.items() if s in BAD}
    trace = read_trace(second.guard)
    if trace is None:
        return Touched(unmeasured=frozenset(failing))
    requested = set(trace_request(baseline))
    capped = (failing - requested) | (trace.capped & failing)
    measured = (failing & trace.traced) - capped
    paths = {p for test in measured for p in trace.lines.get(test, {})}
    edited = edited_lines(repo, old, new, paths) if paths else {}
    hit = {test for test in measured if _meets(trace.lines.get(test, {}), edited)}
    # A test that started a process ran lines its trace never saw: unless what was
    # traced is already touched, it is not measured.
    blind = (measured & trace.blind) - hit
    return Touched(frozenset(hit | capped), frozenset(capped),
                   frozenset(failing - measured - capped) | blind)


def touched_notes(touched: Touched | None, same_failing: list[str]) -> list[str]:
    """What the verdict says of the failing-before-and-after tests it did not excuse
    because the change edits code they run."""
    if touched is None:
        return []
    hit = sorted(t for t in same_failing if t in touched.tests)
    notes = []
    traced = [t for t in hit if t not in touched.capped]
    if traced:
        notes.append("failing before and after, but the change edits lines these tests "
                     "run on the base (traced), so they are the issue's tests, still "
                     "failing, not excused: " + _listed(traced))
    capped = [t for t in hit if t in touched.capped]
    if capped:
        notes.append("failing before and after, not excused: the trace of the code these "
                     f"tests run went past its bound (at most {MAX_TRACED} tests, and "
                     "lines and files per test), so they count as touched by the change: "
                     + _listed(capped))
    return notes


def unmeasured_flags(touched: Touched | None, preexisting: list[str]) -> list[str]:
    """For the reviewer: tests excused as failing before and after without a trace."""
    if touched is None:
        return []
    blind = sorted(t for t in preexisting if t in touched.unmeasured)
    if not blind:
        return []
    return ["excused as failing before and after without a measure: no whole trace of "
            "the code they run could be made (the runner did not load the harness's pytest "
            "guard, or the test started a process), so whether the change edits that code "
            "is not known: " + _listed(blind)]


def _listed(tests: list[str], limit: int = 10) -> str:
    return ", ".join(tests[:limit]) + (f", … and {len(tests) - limit} more"
                                       if len(tests) > limit else "")
