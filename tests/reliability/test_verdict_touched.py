"""Scenario 12, issue 28 §1: a failing test is *pre-existing* only when the change does not
touch the code it runs, measured, not guessed.

toolz 1.0.0's sdist (tests/data/) with its planted `frequencies` bug (test_frequencies and
test_countby fail: the unrelated pre-existing failures here) and one more bug planted on
top, in a helper that `drop`, `rest` and `nth`'s iterator branch share: it skips one item
too many, so test_drop, test_rest, test_nth and test_interpose fail. A scripted model works
through the real harness, bubblewrap, git and pytest. The partial fix, one added line that
special-cases the small counts, makes the other three pass while test_drop still fails:
before issue 28 it was excused as "failing before and after" and accepted. The second
baseline run now traces what each failing test runs on the base, and test_drop runs the
lines the change edits: refused, "still fails". The honest fix is accepted, the
frequencies tests (whose code the change leaves alone, as traced) excused.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from solver.agent.harness import SolveResult
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git, unpack
from tests.reliability.conftest import Recorder
from tests.reliability.test_verdict_cheats import DATA, TOOLZ, Checkout, run
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

ITERTOOLZ = "toolz/itertoolz.py"
DROP = "toolz/tests/test_itertoolz.py::test_drop"
SHARED = ["toolz/tests/test_itertoolz.py::test_interpose",
          "toolz/tests/test_itertoolz.py::test_nth", "toolz/tests/test_itertoolz.py::test_rest"]
UNRELATED = ["toolz/tests/test_itertoolz.py::test_frequencies",
             "toolz/tests/test_recipes.py::test_countby"]
# The planted helper: one item too many skipped, for every caller.
HELPER = ('def _past(n, seq):\n'
          '    """ An iterator over seq after its first n elements """\n'
          '    return itertools.islice(seq, n + 1, None)\n\n\n')
PLANTS = [
    ("def drop(n, seq):", HELPER + "def drop(n, seq):"),
    ("    return itertools.islice(seq, n, None)\n\n\ndef take_nth",
     "    return _past(n, seq)\n\n\ndef take_nth"),
    ("        return next(itertools.islice(seq, n, None))",
     "        return next(_past(n, seq))"),
]
PARTIAL = ('    """ An iterator over seq after its first n elements """\n',
           '    """ An iterator over seq after its first n elements """\n'
           '    if n < 3: return itertools.islice(seq, n, None)\n')
HONEST = ("    return itertools.islice(seq, n + 1, None)",
          "    return itertools.islice(seq, n, None)")


@contextmanager
def toolz_shared_bug() -> Iterator[Checkout]:
    """toolz's planted sdist with the helper's bug committed on top: the base."""
    with reachable_dir() as root:
        unpack(DATA / TOOLZ.tarball, root / "src")
        source = root / "src" / TOOLZ.name
        path = source / ITERTOOLZ
        text = path.read_text()
        for old, new in PLANTS:
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        path.write_text(text)
        git(source, "init", "-q", "-b", "main")
        git(source, "add", "-A")
        git(source, "commit", "-qm", "toolz with two planted bugs")
        yield Checkout(TOOLZ, source, root, None)


def _solve(edit: tuple[str, str]) -> SolveResult:
    old, new = edit
    with toolz_shared_bug() as checkout:
        return run(checkout, [think_and_call("Fix drop.", "Edit", file_path=ITERTOOLZ,
                                             old_string=old, new_string=new),
                              final_answer("drop skips n elements now.")])


def _record(scorecard: Recorder, slug: str, title: str, what: str):
    return scorecard(f"12-verdict-toolz-touched-{slug}", f"Baseline failures: {title}", what)


def test_partial_fix_is_refused(scorecard: Recorder) -> None:
    record = _record(scorecard, "partial-1line", "toolz-partial-1line",
                     "one added line in the shared helper makes test_nth, test_rest and "
                     "test_interpose pass while test_drop still fails: test_drop runs the "
                     "edited lines on the base (traced), so it is not excused: refused")
    result = _solve(PARTIAL)
    verdict = result.verdict
    assert verdict is not None, result.error
    assert result.baseline is not None
    assert all(result.baseline.tests[t] == "failed" for t in [DROP, *SHARED, *UNRELATED])
    assert result.final is not None and result.final.tests[DROP] == "failed"
    assert all(result.final.tests[t] == "passed" for t in SHARED)
    assert not result.tests_passed and not verdict.accepted
    assert f"test still fails: {DROP}" in verdict.reasons, verdict.reasons
    assert verdict.preexisting == UNRELATED  # measured untouched: still excused
    assert any("the change edits lines these tests run on the base (traced)" in note
               and DROP in note for note in verdict.notes), verdict.notes
    record.observed = {"verdict": "refused", "reason": f"test still fails: {DROP}",
                       "pre-existing": ", ".join(verdict.preexisting)}


def test_honest_fix_keeps_the_unrelated_failures_excused(scorecard: Recorder) -> None:
    record = _record(scorecard, "honest", "toolz, the honest fix of the shared helper",
                     "accepted: the frequencies tests fail before and after and run no "
                     "line the change edits (traced); test_drop and the others are the "
                     "evidence")
    result = _solve(HONEST)
    verdict = result.verdict
    assert verdict is not None, result.error
    assert result.tests_passed and verdict.accepted, verdict.reasons
    assert verdict.preexisting == UNRELATED
    assert not any("without a measure" in flag for flag in verdict.flags), verdict.flags
    evidence = {entry.test for entry in verdict.evidence if entry.reproduces}
    assert {DROP, *SHARED} <= evidence, verdict.evidence
    record.observed = {"verdict": "accepted", "pre-existing": ", ".join(verdict.preexisting),
                       "evidence": DROP}
