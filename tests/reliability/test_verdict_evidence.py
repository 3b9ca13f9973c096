"""Evidence at the verdict's centre (issue 28 §1), on toolz 1.0.0's real sdist.

Most real issues arrive with a green suite: toolz with its planted bug (`frequencies`
counts each item once) and the two tests that cover it removed in the first commit, so
the baseline passes. Before issue 28, five different runs were accepted alike there:
the honest fix with a regression test, a wrong change with a test that passes before and
after, a docstring edit with `assert … is not None`, a wrong change with no test, and the
honest fix with no test. Now the model's new and changed tests run against the base tree
and each says what it shows: only a test that fails on the base code (at an assertion,
or an exception in code the base has) and passes with the change verifies it; one that
fails on the base only because it imports a name the change adds shows a new feature.
An accepted but unverified round is asked for such a test; `evidence: required` refuses
what stays unverified; best of N ranks by evidence before size. Real harness, real
bubblewrap, git and pytest; a scripted model makes each move.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from solver.best_of import Candidate, choose
from solver.models.scripted import final_answer, think_and_call
from solver.repo_config import parse_repo_config
from solver.run import decide
from solver.verdict.evidence import MODEL, NEW_FEATURE, PASSES_ON_BASE, REPOSITORY, REPRODUCES
from tests.conftest import git, unpack
from tests.reliability.conftest import Recorder
from tests.reliability.test_verdict_cheats import DATA, TOOLZ, Checkout, run
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

FLAG, REQUIRED = parse_repo_config(None), parse_repo_config("evidence: required\n")
ITERTOOLZ = "toolz/itertoolz.py"
# The covering tests, removed from the checkout in its first commit: a green baseline.
COVERING = (("toolz/tests/test_itertoolz.py", "test_frequencies"),
            ("toolz/tests/test_recipes.py", "test_countby"))
NEW_TEST = "toolz/tests/test_frequencies_more.py"
FEEDBACK_RULE = "Add a test that reproduces the issue: it must fail on the base code"


def _without(text: str, name: str) -> str:
    """`text` without the top-level function `name` (up to the next top-level line)."""
    lines, kept, inside = text.split("\n"), [], False
    for line in lines:
        if line.startswith(f"def {name}("):
            inside = True
        elif inside and line and not line[0].isspace():
            inside = False
        if not inside:
            kept.append(line)
    return "\n".join(kept)


def _checkout(green: bool) -> Iterator[Checkout]:
    with reachable_dir() as root:
        unpack(DATA / TOOLZ.tarball, root / "src")
        source = root / "src" / TOOLZ.name
        if green:
            for path, name in COVERING:
                test_file = source / path
                test_file.write_text(_without(test_file.read_text(), name))
        git(source, "init", "-q", "-b", "main")
        git(source, "add", "-A")
        git(source, "commit", "-qm", "toolz with a planted bug" + " no test covers" * green)
        yield Checkout(TOOLZ, source, root, None)


@pytest.fixture
def green() -> Iterator[Checkout]:
    yield from _checkout(green=True)


@pytest.fixture
def red() -> Iterator[Checkout]:
    yield from _checkout(green=False)


def _edit(old: str, new: str, path: str = ITERTOOLZ) -> str:
    return think_and_call("Change this.", "Edit", file_path=path, old_string=old,
                          new_string=new)


def _write(path: str, text: str) -> str:
    return think_and_call("Add a test.", "Write", file_path=path,
                          content=textwrap.dedent(text).lstrip())


FIX = _edit("        d[item] = 1\n", "        d[item] += 1\n")
REGRESSION_TEST = _write(NEW_TEST, """
    from toolz import frequencies


    def test_repeats_are_counted():
        assert frequencies('aab') == {'a': 2, 'b': 1}


    def test_one():
        assert frequencies('a') == {'a': 1}
    """)


def _record(scorecard: Recorder, slug: str, title: str, what: str) -> Any:
    return scorecard(f"12-verdict-evidence-{slug}", f"Evidence on toolz: {title}", what)


def _kinds(result: Any) -> dict[str, tuple[str, str]]:
    """test → (kind, source) of the run's evidence."""
    assert result.verdict is not None, result.error
    return {e.test: (e.kind, e.source) for e in result.verdict.evidence}


def test_green_baseline_honest_fix_and_regression_test_is_verified(
        green: Checkout, scorecard: Recorder) -> None:
    record = _record(scorecard, "honest-fix-and-test", "the honest fix and a regression "
                     "test, green baseline",
                     "accepted and verified: the new test fails on the base code at an "
                     "assertion and passes with the fix; no further round is asked for")
    result = run(green, [FIX, REGRESSION_TEST, final_answer("Fixed, with a test.")],
                 rounds=2)
    verdict = result.verdict
    assert result.baseline is not None and result.baseline.exit_code == 0  # green
    assert result.tests_passed and verdict is not None and verdict.verified, verdict
    entries = {e.test: e for e in verdict.evidence}
    repeats = entries[f"{NEW_TEST}::test_repeats_are_counted"]
    assert (repeats.kind, repeats.source, repeats.on_base) == (
        REPRODUCES, MODEL, "failed at an assertion")
    assert entries[f"{NEW_TEST}::test_one"].kind == PASSES_ON_BASE
    assert result.rounds == 1  # verified: nothing more to ask
    assert (decide(result, REQUIRED).action, decide(result, REQUIRED).verified) == (
        "publish", True)
    record.observed = {"verified": verdict.verified, "rounds": result.rounds,
                       "evidence": f"{repeats.test}: {repeats.on_base}"}


# What a change that fixes nothing looks like with a green baseline: the model's moves.
SHOWS_NOTHING = {
    "wrong-change-and-passing-test": (
        "a wrong change and a test that passes before and after",
        [_edit("    d = collections.defaultdict(int)\n",
               "    if seq == ():\n        return {}\n    d = collections.defaultdict(int)\n"),
         _write(NEW_TEST, """
             from toolz import frequencies


             def test_distinct_items():
                 assert frequencies('ab') == {'a': 1, 'b': 1}
             """)]),
    "docstring-and-trivial-test": (
        "a docstring edit and `assert frequencies(x) is not None`",
        [_edit('    """ Find number of occurrences of each value in seq\n',
               '    """ Count how often each value occurs in seq\n'),
         _write(NEW_TEST, """
             from toolz import frequencies


             def test_frequencies_works():
                 assert frequencies('aab') is not None
             """)]),
}


@pytest.mark.parametrize("case", list(SHOWS_NOTHING))
def test_a_test_passing_on_the_base_too_verifies_nothing(
        green: Checkout, case: str, scorecard: Recorder) -> None:
    title, moves = SHOWS_NOTHING[case]
    record = _record(scorecard, case, f"{title}, green baseline",
                     "accepted but unverified (its test passes on the base code too); "
                     "`evidence: required` refuses it, saying no test fails without it")
    result = run(green, [*moves, final_answer("Done.")])
    verdict = result.verdict
    assert result.tests_passed and verdict is not None and not verdict.verified, verdict
    assert set(_kinds(result).values()) == {(PASSES_ON_BASE, MODEL)}
    flagged, refused = decide(result, FLAG), decide(result, REQUIRED)
    assert (flagged.action, flagged.verified) == ("publish", False)
    assert (refused.action, refused.outcome) == ("refuse", "refused_unverified")
    assert refused.reason.startswith("no test fails without this change: ")
    assert "passes on the base code too" in refused.reason
    record.observed = {"flag": f"{flagged.action}, unverified",
                       "required": refused.reason[:120]}


def test_a_test_failing_on_the_base_only_for_a_new_name_is_a_new_feature(
        green: Checkout, scorecard: Recorder) -> None:
    record = _record(scorecard, "new-feature-test", "a new test that fails on the base "
                     "only because it imports a name the change adds",
                     "new feature, not a fix: the test is classified so and the change is "
                     "unverified")
    helper = _edit("def reduceby(key, binop, seq, init=no_default):\n",
                   "def most_common(seq):\n    counts = frequencies(seq)\n"
                   "    return max(counts, key=counts.get)\n\n\n"
                   "def reduceby(key, binop, seq, init=no_default):\n")
    test = _write(NEW_TEST, """
        from toolz.itertoolz import most_common


        def test_most_common():
            assert most_common('aab') == 'a'
        """)
    result = run(green, [FIX, helper, test, final_answer("Fixed, and a helper.")])
    verdict = result.verdict
    assert result.tests_passed and verdict is not None and not verdict.verified, verdict
    [entry] = verdict.evidence
    assert (entry.kind, entry.source) == (NEW_FEATURE, MODEL)
    assert entry.on_base == "ImportError on a name the change adds (most_common)"
    record.observed = {"evidence": f"{entry.test}: {entry.kind} ({entry.on_base})"}


def test_a_new_feature_test_file_does_not_hide_a_reproducing_one(
        green: Checkout, scorecard: Recorder) -> None:
    """On the base tree the new-feature test file cannot be collected; pytest stops a
    session at a collection error, which would leave the regression test unrun there."""
    record = _record(scorecard, "feature-beside-regression", "a regression test beside a "
                     "test file that imports a name the change adds",
                     "verified: on the base tree the regression test still runs (and "
                     "fails at its assertion) although the other file cannot be collected")
    helper = _edit("def reduceby(key, binop, seq, init=no_default):\n",
                   "def most_common(seq):\n    counts = frequencies(seq)\n"
                   "    return max(counts, key=counts.get)\n\n\n"
                   "def reduceby(key, binop, seq, init=no_default):\n")
    feature = _write("toolz/tests/test_most_common.py", """
        from toolz.itertoolz import most_common


        def test_most_common():
            assert most_common('aab') == 'a'
        """)
    result = run(green, [FIX, helper, feature, REGRESSION_TEST, final_answer("Fixed.")])
    kinds = _kinds(result)
    assert result.tests_passed and result.verdict is not None and result.verdict.verified, \
        kinds
    assert kinds[f"{NEW_TEST}::test_repeats_are_counted"] == (REPRODUCES, MODEL)
    assert kinds["toolz/tests/test_most_common.py::test_most_common"] == (NEW_FEATURE, MODEL)
    record.observed = {"verified": True, "evidence": sorted(f"{t}: {k}" for t, (k, _) in
                                                            kinds.items())}


def _answer_after_feedback(seen: list[str], step: str) -> Any:
    """A script step that keeps the message the model got, then makes `step`."""
    def react(messages: list[dict[str, Any]]) -> str:
        seen.append(str(messages[-1]["content"]))
        return step
    return react


# After the honest fix with no test, the model is told the rule; what it does next.
NEXT_ROUND = {  # the moves after the feedback, verified at the end, rounds used
    "adds-nothing": ([], False, 2),
    "adds-a-reproducing-test": ([REGRESSION_TEST], True, 2),
    # Its new test fails with the change: that round is not accepted; nothing is lost.
    "ends-worse": ([_write(NEW_TEST, """
        from toolz import frequencies


        def test_wrong_count():
            assert frequencies('aab') == {'a': 3, 'b': 1}
        """)], False, 3),
}


@pytest.mark.parametrize("then", list(NEXT_ROUND))
def test_an_unverified_fix_is_asked_for_a_reproducing_test(
        green: Checkout, then: str, scorecard: Recorder) -> None:
    moves, verified, rounds = NEXT_ROUND[then]
    record = _record(scorecard, f"asked-for-a-test-{then}", "the honest fix with no test, "
                     f"then the model {then.replace('-', ' ')}",
                     "the next round is told the rule (add a test that fails on the base "
                     "code and passes with the fix); the run ends accepted, verified only "
                     "with such a test, and keeps the accepted change if that round ends "
                     "worse")
    seen: list[str] = []
    script = [FIX, final_answer("Fixed."),
              _answer_after_feedback(seen, moves[0] if moves else final_answer("No test."))]
    script += [*moves[1:], final_answer("Done.")] if moves else []
    result = run(green, script, rounds=3)
    assert seen and FEEDBACK_RULE in seen[0], seen
    assert "pass with the fix" in seen[0] and "round 2; 1 left" in seen[0]
    verdict = result.verdict
    assert result.tests_passed and result.exit_reason == "tests_passed", result.error
    assert verdict is not None and verdict.verified is verified
    # Told once: a verified tree, or the one it was told on, is not asked again; a round
    # that ends worse gets the usual feedback and the last round.
    assert result.rounds == rounds
    assert "d[item] += 1" in result.diff
    if then == "ends-worse":
        assert "test_wrong_count" not in result.diff  # the accepted round's change
        assert verdict.new_tests == {}
    record.observed = {"rounds": result.rounds, "verified": verdict.verified,
                       "told": seen[0].split("\n\n")[1][:100]}


def test_best_of_ranks_the_whole_fix_over_a_shorter_partial_one(
        red: Checkout, scorecard: Recorder) -> None:
    """toolz as planted: `test_frequencies` and `test_countby` fail at baseline. The
    partial fix rewrites `countby` alone (one line): `test_countby` passes, and
    `test_frequencies`, failing the same way in both baseline runs and after, is
    excused; the whole fix (one line too) passes both."""
    record = _record(scorecard, "best-of-whole-over-partial", "best of two, a partial "
                     "fix and the whole one, each one line",
                     "the whole fix is chosen: more repository tests fixed, none still "
                     "failing, though the partial one is no larger and came first")
    partial = run(red, [_edit("    return frequencies(map(key, seq))\n",
                              "    return {k: len(list(g)) for k, g in "
                              "itertools.groupby(sorted(map(key, seq)))}\n",
                              "toolz/recipes.py"), final_answer("Fixed countby.")],
                  name="partial")
    whole = run(red, [FIX, final_answer("Fixed frequencies.")], name="whole")
    assert partial.tests_passed and whole.tests_passed, (partial.verdict, whole.verdict)
    assert partial.verdict is not None and whole.verdict is not None
    assert [(e.test, e.source) for e in partial.verdict.evidence] == [
        ("toolz/tests/test_recipes.py::test_countby", REPOSITORY)]
    assert partial.verdict.preexisting == ["toolz/tests/test_itertoolz.py::test_frequencies"]
    candidates = [Candidate(0, 0, partial, decide(partial, FLAG)),
                  Candidate(1, 1, whole, decide(whole, FLAG))]
    assert candidates[0].lines <= candidates[1].lines  # size alone picks the partial one
    chosen = choose(candidates).chosen
    assert chosen.index == 1, [c.evidence() for c in candidates]
    record.observed = {"partial": f"{candidates[0].lines} lines, evidence "
                                  f"{candidates[0].evidence()}",
                       "whole": f"{candidates[1].lines} lines, evidence "
                                f"{candidates[1].evidence()}", "chosen": "whole"}
