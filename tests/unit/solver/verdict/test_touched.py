"""A failing test is pre-existing only when the change leaves alone the code it runs
(solver/verdict/touched.py, issue 28 §1): the pytest guard's real trace, in a real pytest
run of a real git repository's base, met with git's diff of the change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from solver.hostgit import HostRepo
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.touched import (
    MAX_TRACED,
    Touched,
    hunk_lines,
    read_trace,
    touched_tests,
    trace_request,
    unmeasured_flags,
    write_trace_request,
)
from solver.verdict.verdict import Reruns, decide, excuse
from solver.verdict.verdict_run import GUARD_DIR, guard_findings
from tests.conftest import make_repo

CORE = '''\
def _past(n, seq):
    return list(seq)[n + 1:]


def drop(n, seq):
    return _past(n, seq)


def rest(seq):
    return _past(1, seq)


def frequencies(seq):
    return {item: 1 for item in seq}
'''
TESTS = '''\
from pkg.core import drop, frequencies, rest


def test_drop():
    assert drop(2, "abcd") == ["c", "d"]


def test_rest():
    assert rest("abc") == ["b", "c"]


def test_frequencies():
    assert frequencies("aab") == {"a": 2, "b": 1}
'''
DROP, REST, FREQ = (f"tests/test_core.py::test_{n}" for n in ("drop", "rest", "frequencies"))
FAILING = {DROP: "failed", REST: "failed", FREQ: "failed"}


def _verdict(tests: dict[str, str], guard: dict[str, list[str]] | None = None
             ) -> TestVerdict:
    return TestVerdict(command="pytest", exit_code=1 if "failed" in tests.values() else 0,
                       timed_out=False, seconds=1.0, output="", tests=tests, report="junit",
                       report_writes=1, guard=guard)


def _traced_base(tmp_path: Path, tests: str = TESTS,
                 failing: dict[str, str] = FAILING) -> tuple[HostRepo, TestVerdict]:
    """The base, and its run by real pytest with the guard asked to trace the failures."""
    source = make_repo(tmp_path / "src", {"pkg/__init__.py": "", "pkg/core.py": CORE,
                                          "tests/test_core.py": tests})
    repo = HostRepo.create(source, None, tmp_path / "git", tmp_path / "work")
    base = tmp_path / "base"
    repo.materialize(repo.base, base)
    channel = tmp_path / "channel"
    channel.mkdir()
    write_trace_request(channel, trace_request(_verdict(failing)))
    env = {**os.environ, "PYTHONPATH": str(GUARD_DIR), "PYTHONDONTWRITEBYTECODE": "1",
           "FROGNANO_GUARD_REPORT": str(channel / "guard.json")}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                   cwd=base, env=env, capture_output=True, timeout=120, check=False)
    guard = guard_findings([(channel / "guard.json").read_bytes()], False)
    return repo, _verdict(failing, guard)


def _change(repo: HostRepo, old: str, new: str) -> str:
    path = repo.work_tree / "pkg" / "core.py"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return repo.snapshot().tree


def test_the_trace_is_of_the_lines_each_failing_test_runs(tmp_path: Path) -> None:
    _repo, second = _traced_base(tmp_path)
    trace = read_trace(second.guard)
    assert trace is not None and trace.traced == {DROP, REST, FREQ} and not trace.capped
    assert trace.lines[DROP]["pkg/core.py"] == {1, 2, 5, 6}  # drop's lines and _past's
    assert trace.lines[FREQ]["pkg/core.py"] == {13, 14}
    assert "tests/test_core.py" in trace.lines[DROP]  # the test's own lines too


def test_a_test_whose_code_the_change_edits_is_touched(tmp_path: Path) -> None:
    """A one-line partial fix inside the helper: drop's test runs it (touched), the
    frequencies test does not (still excused as failing before and after)."""
    repo, second = _traced_base(tmp_path)
    tree = _change(repo, "    return list(seq)[n + 1:]\n",
                   "    if n < 2: return list(seq)[n:]\n    return list(seq)[n + 1:]\n")
    touched = touched_tests(second, second, repo, repo.test_base, tree)
    assert touched == Touched(frozenset({DROP, REST}))
    final = _verdict({DROP: "failed", REST: "passed", FREQ: "failed"})
    excused = excuse(second, second, final, touched)
    assert excused.preexisting == {FREQ: "failed"} and excused.touched == {DROP}
    from solver.verdict.suite_paths import TreePlan
    verdict = decide(second, final, TreePlan(), reruns=Reruns(second, touched=touched))
    assert not verdict.accepted and f"test still fails: {DROP}" in verdict.reasons
    assert verdict.preexisting == [FREQ]
    assert any("traced" in note and DROP in note for note in verdict.notes)


def test_a_change_elsewhere_touches_nothing(tmp_path: Path) -> None:
    repo, second = _traced_base(tmp_path)
    tree = _change(repo, "return {item: 1 for item in seq}", "return dict.fromkeys(seq, 1)")
    assert touched_tests(second, second, repo, repo.test_base, tree).tests == {FREQ}
    # A function added after the others: the lines around it run in no test.
    tree = _change(repo, "return dict.fromkeys(seq, 1)\n",
                   "return dict.fromkeys(seq, 1)\n\n\ndef more():\n    return 1\n")
    assert touched_tests(second, second, repo, repo.test_base, tree).tests == {FREQ}


def test_no_trace_keeps_the_old_rule_and_says_so() -> None:
    """A runner without the guard (unittest, make): nothing measured, the excuse as
    before, and the reviewer told."""
    second = _verdict(FAILING)
    touched = touched_tests(second, second, None, "", "")  # type: ignore[arg-type]
    assert touched == Touched(unmeasured=frozenset(FAILING))
    excused = excuse(second, second, second, touched)
    assert set(excused.preexisting) == set(FAILING)
    flags = unmeasured_flags(touched, sorted(excused.preexisting))
    assert len(flags) == 1 and "without a measure" in flags[0] and DROP in flags[0]


def test_a_test_that_starts_a_process_is_not_measured(tmp_path: Path) -> None:
    """The trace follows no subprocess: what the child ran is unknown."""
    spawning = TESTS.replace('    assert drop(2, "abcd") == ["c", "d"]',
                             '    import subprocess, sys\n'
                             '    subprocess.run([sys.executable, "-c", "pass"], check=True)\n'
                             '    assert drop(2, "abcd") == ["c", "d"]')
    repo, second = _traced_base(tmp_path, spawning)
    trace = read_trace(second.guard)
    assert trace is not None and trace.blind == {DROP}
    tree = _change(repo, "return {item: 1 for item in seq}", "return dict.fromkeys(seq, 1)")
    touched = touched_tests(second, second, repo, repo.test_base, tree)
    assert touched.tests == {FREQ} and touched.unmeasured == {DROP}


def test_past_the_bounds_counts_as_touched() -> None:
    many = {f"t.py::test_{i:04d}": "failed" for i in range(MAX_TRACED + 5)}
    traced = sorted(many)[:MAX_TRACED]
    guard = {"trace_tests": traced[1:], "trace_capped": traced[:1], "traced": []}
    second = _verdict(many, guard)
    touched = touched_tests(second, second, None, "", "")  # type: ignore[arg-type]
    assert touched.capped == touched.tests == {traced[0], *sorted(many)[MAX_TRACED:]}
    assert not touched.unmeasured


def test_hunks_give_the_base_lines_a_change_edits() -> None:
    assert hunk_lines(b"@@ -3,2 +3,3 @@\n-a\n-b\n+c\n+d\n+e\n") == frozenset({3, 4})
    assert hunk_lines(b"@@ -7 +6,0 @@\n-gone\n") == frozenset({7})
    # An insertion after line 4: the lines on either side.
    assert hunk_lines(b"@@ -4,0 +5 @@\n+new\n") == frozenset({4, 5})
    assert hunk_lines(b"Binary files a and b differ\n") is None  # the whole file
