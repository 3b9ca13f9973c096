"""The verdict: may this change be proposed as "the repository's tests pass"?

A pure decision from the baseline run, the verdict run (the change with the repository's
original tests and test configuration restored), the run with the model's own test files
added, and the plan of what was restored. Every reason not to accept is named exactly, because
it goes back to the model as feedback and to the maintainer in the status comment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from solver.verdict.change_flags import ChangeFlag
from solver.verdict.evidence import (
    REPOSITORY,
    REPRODUCES,
    TestEvidence,
    model_evidence,
    repository_evidence,
    reproducing,
)
from solver.verdict.lint_items import edited_lint_flags, is_lint_item, lint_failing
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.suite_paths import TreePlan, is_test_config, is_test_path
from solver.verdict.touched import Touched, touched_notes, unmeasured_flags

RAN = ("passed", "failed", "error")  # statuses of a test that ran
BAD = ("failed", "error")
MAX_LISTED = 20  # reasons past this many are counted, not listed


@dataclass
class Verdict:
    accepted: bool
    reasons: list[str] = field(default_factory=list)  # why it is not accepted; empty if accepted
    notes: list[str] = field(default_factory=list)  # how it was decided, said either way
    new_tests: dict[str, str] = field(default_factory=dict)  # the model's tests → status
    mode: str = "per-test"  # or "exit code" for runners without a per-test report
    flags: list[str] = field(default_factory=list)  # suspicious, said loudly either way
    # What no test run tells from a fix, for the reviewer first (change_flags.py).
    read_first: list[ChangeFlag] = field(default_factory=list)
    # Baseline failures the change is not blamed for (`excuse`): failing the same way in
    # both baseline runs and after the change, or flipping between the baseline runs.
    preexisting: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    # What shows the change does something, per test (evidence.py): the model's new and
    # changed tests run against the base tree, and the repository's tests that failed at
    # baseline and pass on the change.
    evidence: list[TestEvidence] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        """Whether a test fails on the base code and passes with the change."""
        return any(entry.kind == REPRODUCES for entry in self.evidence)

    def new_tests_summary(self) -> str:
        if not self.new_tests:
            return "new tests: none"
        return "new tests: " + _counts(self.new_tests)

    def to_dict(self) -> dict[str, object]:
        return {"accepted": self.accepted, "reasons": self.reasons, "notes": self.notes,
                "new_tests": self.new_tests, "mode": self.mode, "flags": self.flags,
                "read_first": [flag.to_dict() for flag in self.read_first],
                "preexisting": self.preexisting, "flaky": self.flaky,
                "evidence": [entry.to_dict() for entry in self.evidence],
                "verified": self.verified}


def _counts(tests: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for status in tests.values():
        counts[status] = counts.get(status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def _capped(reasons: list[str]) -> list[str]:
    if len(reasons) <= MAX_LISTED:
        return reasons
    return [*reasons[:MAX_LISTED], f"… and {len(reasons) - MAX_LISTED} more"]


def _per_test(baseline: dict[str, str], final: dict[str, str],
              excused: frozenset[str] = frozenset()) -> list[str]:
    """Every test seen at baseline must still be there; every one that ran must pass
    (but those `excused`: failing before and after, or flaky)."""
    reasons = []
    for test, before in sorted(baseline.items()):
        after = final.get(test)
        if test in excused:
            continue
        if after is None:
            reasons.append(f"test no longer runs: {test}" if before in RAN
                           else f"test is no longer collected: {test} (was {before})")
        elif after in BAD:
            reasons.append(f"test {'still ' if before in BAD else ''}"
                           f"{'fails' if after == 'failed' else 'errors'}: {test}"
                           + (" (a lint or type check that passed on the base: the "
                              "change's own finding)" if is_lint_item(test)
                              and before not in BAD else ""))
        elif before in RAN and after in ("skipped", "xfailed"):
            reasons.append(f"test is now {after}: {test}")
    for test, after in sorted(final.items()):
        if test not in baseline and after in BAD:
            reasons.append(f"test {'fails' if after == 'failed' else 'errors'}: {test}")
    return reasons


def _exit_agrees(run: TestVerdict, label: str) -> list[str]:
    """The runner's exit status and its report must tell the same story."""
    bad = sorted(t for t, s in run.tests.items() if s in BAD)
    if run.exit_code == 0 and bad:
        return [f"the {label} exited 0 but its report lists {len(bad)} failing "
                f"test(s), e.g. {bad[0]}"]
    if run.exit_code != 0 and not bad and run.tests:
        return [f"the {label} exited {run.exit_code} although every test in its report "
                "passed"]
    return []


GUARD_SAYS = {
    "plugins": "code under test registered a pytest plugin",
    "patched": "code under test patched pytest",
    "import_hooks": "code under test added an import hook",
    "swapped": "the code of a test was replaced while the tests ran",
    "tampered": "the pytest guard's report was tampered with",
    "bounds": "a channel from the sandbox went past its bound",
    "replaced": "code under test replaced part of the test machinery (pytest, pluggy, "
                "unittest, doctest, builtins or operator)",
    "foreign_plugins": "a pytest plugin that is neither pytest's own, a conftest nor an "
                       "installed entry point was registered",
}


def _doctest_examples(baseline: TestVerdict, run: TestVerdict) -> list[str]:
    """The examples each baseline doctest item ran with (the guard's digests): the
    originals must all be there, in order, whatever the code did to `__doc__`."""
    def by_item(verdict: TestVerdict) -> dict[str, list[str]]:
        entries = (verdict.guard or {}).get("doctest_examples", [])
        return {item: digests.split(",") for item, _, digests in
                (entry.partition("\x1f") for entry in entries)}
    before, after = by_item(baseline), by_item(run)
    reasons = []
    for item, original in sorted(before.items()):
        rest = iter(after.get(item, original))
        if item in after and not all(any(d == o for o in rest) for d in original):
            reasons.append(f"the doctest {item} ran with examples other than the "
                           "repository's (changed while the tests ran)")
    return reasons


def _run_checks(baseline: TestVerdict, run: TestVerdict, label: str
                ) -> tuple[list[str], list[str]]:
    """What the harness saw of the run itself, against the baseline's run of the same
    command: the report's writes, the pytest guard's findings, the tree during the run."""
    reasons: list[str] = []
    flags: list[str] = []
    if run.report_writes > baseline.report_writes >= 1:
        reasons.append(f"the report was written more than once ({run.report_writes} "
                       f"writes, {baseline.report_writes} at baseline): something besides "
                       f"the test runner wrote it during the {label}")
    elif 0 < run.report_writes < baseline.report_writes:
        reasons.append(f"the report was written {run.report_writes} time(s), "
                       f"{baseline.report_writes} at baseline, in the {label}")
    if baseline.guard is not None and run.guard is None:
        reasons.append(f"the harness's pytest guard was silent in the {label} (it reported "
                       "at baseline)")
    for key, said in GUARD_SAYS.items():
        seen = set((baseline.guard or {}).get(key, []))
        for item in (run.guard or {}).get(key, []):
            if item not in seen:
                reasons.append(f"{said}: {item}")
    before = set(baseline.changed_during_run)
    for path in run.changed_during_run:
        if path in before:
            continue
        if is_test_path(path) or is_test_config(path):
            reasons.append(f"the tests or their configuration changed while the tests ran: "
                           f"{path}")
        else:
            flags.append(f"the {label} changed code in the tree while it ran: {path}")
    return reasons, flags


PER_TEST = ("junit", "go-json")  # reports that give each test's status


@dataclass(frozen=True)
class Reruns:
    """The runs that tell what the change does: the base once more (`second`, when a
    baseline failure still fails after the change), and the model's new and changed tests
    against the base tree (`model_tests_on_base`, whenever it has some). None: not run.
    With them, what the evidence is read by (evidence.py): the names the change's code
    adds, and which original test ids the model changed."""

    second: TestVerdict | None = None
    model_tests_on_base: TestVerdict | None = None
    new_names: frozenset[str] = frozenset()
    changed_tests: tuple[str, ...] = ()
    # Which baseline failures run code the change edits, traced in `second` (touched.py);
    # None: not measured (a caller that gives no trace keeps the old rule).
    touched: Touched | None = None
    # The paths of code (not tests) the change edits: a lint item failing before and after
    # on one of them is flagged (lint_items.py).
    edited: tuple[str, ...] = ()
    # The change edits no file at all: its tests still failing are the whole refusal.
    nothing_edited: bool = False


@dataclass(frozen=True)
class Excused:
    """SWE-bench's split, with evidence instead of a gold patch (issue 20 §4)."""

    preexisting: dict[str, str]  # test → status: the same in both baseline runs and after
    flaky: dict[str, str]  # test → how it flipped between the two baseline runs
    # Failing the same way throughout, but the change edits code they run: not excused.
    touched: frozenset[str] = frozenset()

    @property
    def tests(self) -> frozenset[str]:
        return frozenset(self.preexisting) | frozenset(self.flaky)

    def used(self, final: TestVerdict) -> bool:
        """Whether the change is accepted only by an excuse: an excused test fails after.
        A lint finding the same before and after needs no evidence (lint_items.py)."""
        return any(final.tests.get(test) in BAD for test in self.tests
                   if not is_lint_item(test))

    def lint_only(self) -> Excused:
        """The lint items alone: what stands when the rest needed evidence and had none."""
        return Excused({t: s for t, s in self.preexisting.items() if is_lint_item(t)},
                       {t: s for t, s in self.flaky.items() if is_lint_item(t)})

    def failing(self, final: TestVerdict) -> bool:
        """Whether an excused test, lint items included, fails after the change."""
        return any(final.tests.get(test) in BAD for test in self.tests)


def needs_second_baseline(baseline: TestVerdict, final: TestVerdict) -> bool:
    """Only a baseline with failures, and a change after which one of its tests still
    fails, can hold a failure the change is not blamed for. A green baseline's rule stays
    as it is: every test passes."""
    return (baseline.report in PER_TEST and final.report == baseline.report
            and any(status in BAD for status in baseline.tests.values())
            and any(final.tests.get(test) in BAD for test in baseline.tests))


def excuse(baseline: TestVerdict, second: TestVerdict, final: TestVerdict,
           touched: Touched | None = None) -> Excused:
    """A test failing the same way in both baseline runs and after the change is a
    pre-existing failure, unless the change edits code it runs (`touched`, measured: then
    it is the issue's test, still failing); one that failed in one baseline run and passed
    in the other is flaky. Neither is blamed on the change, nor evidence for it."""
    same = {test: status for test, status in baseline.tests.items()
            if status in BAD and second.tests.get(test) == status
            and final.tests.get(test) == status}
    # A checker reads the files it checks and runs none: no trace tells its finding.
    traced = frozenset(t for t in same if not is_lint_item(t))
    hit = traced & (touched.tests if touched is not None else frozenset())
    preexisting = {test: status for test, status in same.items() if test not in hit}
    flaky = {}
    for test, first in baseline.tests.items():
        again = second.tests.get(test)
        if first in RAN and again in RAN and (first in BAD) != (again in BAD) \
                and final.tests.get(test) in RAN:
            flaky[test] = f"{first} in one baseline run, {again} in the other"
    return Excused(preexisting, flaky, hit)


def repo_evidence(baseline: TestVerdict, second: TestVerdict, final: TestVerdict
                  ) -> list[str]:
    """The repository's tests that failed in both baseline runs and pass on the change."""
    return sorted(test for test, status in baseline.tests.items() if status in BAD
                  and second.tests.get(test) in BAD and final.tests.get(test) == "passed")


def _original_tests(baseline: TestVerdict, final: TestVerdict, excused: frozenset[str]
                    ) -> tuple[list[str], list[str], str]:
    """The repository's own tests on the change: (reasons, notes, mode)."""
    if baseline.report not in PER_TEST:
        return [], ["verdict from the exit code only: the runner gives no per-test "
                    "report; the repository's original test files were restored"], "exit code"
    if final.report != baseline.report:
        return ["the test run wrote no readable report (the baseline did)"], [], "per-test"
    return (_per_test(baseline.tests, final.tests, excused) + _exit_agrees(final, "test run"),
            [], "per-test")


def _listed(tests: list[str], limit: int = 10) -> str:
    return ", ".join(tests[:limit]) + (f", … and {len(tests) - limit} more"
                                       if len(tests) > limit else "")


def gather_evidence(baseline: TestVerdict, final: TestVerdict,
                    with_model_tests: TestVerdict | None, new_tests: dict[str, str],
                    reruns: Reruns) -> list[TestEvidence]:
    """Every test that tells what the change does (evidence.py): the repository's that
    failed at baseline and pass now, then the model's new and changed ones as they ended
    on the base tree. Nothing from a run without a per-test report."""
    if baseline.report not in PER_TEST or final.report != baseline.report:
        return []
    found = repository_evidence(baseline, reruns.second, final, reruns.new_names)
    on_base = reruns.model_tests_on_base
    if on_base is not None and on_base.report in PER_TEST and with_model_tests is not None:
        changed = {t: with_model_tests.tests[t] for t in reruns.changed_tests
                   if t in with_model_tests.tests}
        found += model_evidence({**changed, **new_tests}, on_base, reruns.new_names)
    return found


def _excused_part(baseline: TestVerdict, final: TestVerdict, reruns: Reruns,
                  verdict: Verdict) -> list[str]:
    """Fill the verdict's pre-existing failures and flaky tests (data, which the PR body
    renders: bot.messages.baseline_failures_lines); the refusal when the change is
    accepted only by an excuse and no test reproduces (a test that shows only a new
    feature excuses nothing)."""
    if reruns.second is None:
        return []
    excused = excuse(baseline, reruns.second, final, reruns.touched)
    verdict.preexisting, verdict.flaky = sorted(excused.preexisting), sorted(excused.flaky)
    verdict.notes += touched_notes(reruns.touched, sorted(excused.touched))
    if not excused.used(final):
        return []
    if not verdict.verified:
        return ["no evidence the change does anything: no test that fails on the base code "
                "passes with it (a repository test, or a new test that fails when run "
                "against the base tree); failing before and after: "
                + _listed([t for t in verdict.preexisting or verdict.flaky
                           if not is_lint_item(t)])]
    return []


def decide(baseline: TestVerdict, final: TestVerdict, plan: TreePlan,
           with_model_tests: TestVerdict | None = None,
           reruns: Reruns | None = None) -> Verdict:
    """Accept only what the repository's own, untouched tests accept; a baseline failure
    is excused only as `excuse` says, and then only with evidence."""
    reruns = reruns or Reruns()
    reasons = list(plan.refusals)
    notes = list(plan.notes)
    if plan.model_tests:
        notes.append("the change edits tests or test configuration; the verdict ran the "
                     "repository's originals (" + ", ".join(plan.model_tests[:10])
                     + (", …" if len(plan.model_tests) > 10 else "") + ")")
    if final.timed_out:
        reasons.append("the test run timed out")
    new_tests = {t: s for t, s in with_model_tests.tests.items() if t not in final.tests} \
        if with_model_tests is not None else {}
    verdict = Verdict(accepted=False, notes=notes, new_tests=new_tests)
    verdict.evidence = gather_evidence(baseline, final, with_model_tests, new_tests, reruns)
    no_evidence = _excused_part(baseline, final, reruns, verdict)
    # An excuse holds only with evidence; without, the failures are listed as ever (but
    # lint findings the same before and after, which need none).
    excused = (excuse(baseline, reruns.second, final, reruns.touched)
               if reruns.second is not None else Excused({}, {}))
    excused = excused.lint_only() if no_evidence else excused
    run_reasons, mode_notes, verdict.mode = _original_tests(baseline, final, excused.tests)
    notes += mode_notes
    # Failing with the baseline's own exit status, for the excused failures only.
    excused_exit = excused.failing(final) and final.exit_code == baseline.exit_code
    if not run_reasons and not final.timed_out and final.exit_code != 0 and not excused_exit:
        run_reasons.append(f"the test run failed with exit code {final.exit_code}")
    checked, flags = _run_checks(baseline, final, "test run")
    checked += _doctest_examples(baseline, final)  # the model's own examples run apart
    # Tampering first, then the missing evidence: the per-test list can be long. A change
    # that edits nothing is refused once, by its failing tests (issue 33 §3).
    no_evidence = [] if run_reasons and reruns.nothing_edited else no_evidence
    reasons += checked + no_evidence + run_reasons
    flags = [*plan.flags, *flags]
    if with_model_tests is not None:
        reasons += _model_tests_reasons(baseline, with_model_tests, new_tests, reasons, flags)
    if reruns.model_tests_on_base is not None:
        checked, more = _run_checks(baseline, reruns.model_tests_on_base,
                                    "run of the model's tests against the base tree")
        reasons += [r for r in checked if r not in reasons]
        flags += [f for f in more if f not in flags]
    verdict.flags = flags + unmeasured_flags(reruns.touched, sorted(
        t for t in excused.preexisting if not is_lint_item(t)))
    verdict.flags += _lint_part(baseline, final, excused, reruns.edited, verdict)
    if excused.used(final) and verdict.verified and not any(
            entry.reproduces and entry.source == REPOSITORY for entry in verdict.evidence):
        # No test of the repository's shows anything: a new test can check a marker the
        # change adds as well as a fix, and the issue's own test may be among the excused.
        verdict.flags.append(
            f"accepted with {len(verdict.preexisting) + len(verdict.flaky)} test(s) failing "
            "before and after, and the only evidence is the model's own new test(s) ("
            + _listed(reproducing(verdict.evidence))
            + "): check that they test what the issue asks")
    verdict.accepted, verdict.reasons = not reasons, _capped(reasons)
    return verdict


def _lint_part(baseline: TestVerdict, final: TestVerdict, excused: Excused,
               edited: tuple[str, ...], verdict: Verdict) -> list[str]:
    """The lint items set aside as failing before and after, said in the notes; the flags
    for those on files the change edits (lint_items.py)."""
    same = [t for t in lint_failing(baseline.tests, final.tests) if t in excused.tests]
    if same:
        verdict.notes.append("lint and type checks failing on the base and with the change, "
                             "the same findings, not the change's (they need no evidence): "
                             + _listed(same))
    return edited_lint_flags(same, edited, baseline.failures, final.failures)


def _model_tests_reasons(baseline: TestVerdict, with_model_tests: TestVerdict,
                         new_tests: dict[str, str], reasons: list[str],
                         flags: list[str]) -> list[str]:
    """The run with the model's own tests: each new test must pass, the run be sound.
    Adds its flags to `flags`; returns the reasons not already in `reasons`."""
    found = []
    for test, status in sorted(new_tests.items()):
        if status in BAD:
            found.append(f"new test {'fails' if status == 'failed' else 'errors'}: {test}")
    if with_model_tests.report in PER_TEST:
        found += _exit_agrees(with_model_tests, "run with the model's tests")
    elif with_model_tests.exit_code != 0:
        found.append("the run with the model's own tests failed with exit code "
                     f"{with_model_tests.exit_code}")
    if with_model_tests.timed_out:
        found.append("the run with the model's own tests timed out")
    checked, more = _run_checks(baseline, with_model_tests, "run with the model's tests")
    found += [r for r in checked if r not in reasons and r not in found]
    flags += [f for f in more if f not in flags]
    return found
