"""The verdict: may this change be proposed as "the repository's tests pass"?

A pure decision from the baseline run, the verdict run (the change with the repository's
original tests and test configuration restored), the run with the model's own test files
added, and the plan of what was restored. Every refusal names its exact reason, because
it goes back to the model as feedback and to the maintainer in the status comment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from solver.verdict.change_flags import ChangeFlag
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.suite_paths import TreePlan, is_test_config, is_test_path

RAN = ("passed", "failed", "error")  # statuses of a test that ran
BAD = ("failed", "error")
MAX_LISTED = 20  # reasons past this many are counted, not listed


@dataclass
class Verdict:
    accepted: bool
    reasons: list[str] = field(default_factory=list)  # why it is refused; empty if accepted
    notes: list[str] = field(default_factory=list)  # how it was decided, said either way
    new_tests: dict[str, str] = field(default_factory=dict)  # the model's tests → status
    mode: str = "per-test"  # or "exit code" for runners without a per-test report
    flags: list[str] = field(default_factory=list)  # suspicious, said loudly either way
    # What no test run tells from a fix, for the reviewer first (change_flags.py).
    read_first: list[ChangeFlag] = field(default_factory=list)

    def new_tests_summary(self) -> str:
        if not self.new_tests:
            return "new tests: none"
        return "new tests: " + _counts(self.new_tests)

    def to_dict(self) -> dict[str, object]:
        return {"accepted": self.accepted, "reasons": self.reasons, "notes": self.notes,
                "new_tests": self.new_tests, "mode": self.mode, "flags": self.flags,
                "read_first": [flag.to_dict() for flag in self.read_first]}


def _counts(tests: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for status in tests.values():
        counts[status] = counts.get(status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def _capped(reasons: list[str]) -> list[str]:
    if len(reasons) <= MAX_LISTED:
        return reasons
    return [*reasons[:MAX_LISTED], f"… and {len(reasons) - MAX_LISTED} more"]


def _per_test(baseline: dict[str, str], final: dict[str, str]) -> list[str]:
    """Every test seen at baseline must still be there; every one that ran must pass."""
    reasons = []
    for test, before in sorted(baseline.items()):
        after = final.get(test)
        if after is None:
            reasons.append(f"test no longer runs: {test}" if before in RAN
                           else f"test is no longer collected: {test} (was {before})")
        elif after in BAD:
            reasons.append(f"test {'still ' if before in BAD else ''}"
                           f"{'fails' if after == 'failed' else 'errors'}: {test}")
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


def decide(baseline: TestVerdict, final: TestVerdict, plan: TreePlan,
           with_model_tests: TestVerdict | None = None) -> Verdict:
    """Accept only what the repository's own, untouched tests accept."""
    reasons = list(plan.refusals)
    notes = list(plan.notes)
    if plan.model_tests:
        notes.append("the change edits tests or test configuration; the verdict ran the "
                     "repository's originals (" + ", ".join(plan.model_tests[:10])
                     + (", …" if len(plan.model_tests) > 10 else "") + ")")
    if final.timed_out:
        reasons.append("the test run timed out")
    mode = "per-test"
    run_reasons: list[str] = []
    if baseline.report in ("junit", "go-json"):
        if final.report != baseline.report:
            run_reasons.append("the test run wrote no readable report (the baseline did)")
        else:
            run_reasons += _per_test(baseline.tests, final.tests)
            run_reasons += _exit_agrees(final, "test run")
    else:
        mode = "exit code"
        notes.append("verdict from the exit code only: the runner gives no per-test "
                     "report; the repository's original test files were restored")
    if not run_reasons and not final.timed_out and final.exit_code != 0:
        run_reasons.append(f"the test run failed with exit code {final.exit_code}")
    checked, flags = _run_checks(baseline, final, "test run")
    checked += _doctest_examples(baseline, final)  # the model's own examples run apart
    reasons += checked + run_reasons  # tampering first: the per-test list can be long
    flags = [*plan.flags, *flags]
    new_tests: dict[str, str] = {}
    if with_model_tests is not None:
        new_tests = {t: s for t, s in with_model_tests.tests.items() if t not in final.tests}
        for test, status in sorted(new_tests.items()):
            if status in BAD:
                reasons.append(f"new test {'fails' if status == 'failed' else 'errors'}: "
                               f"{test}")
        if with_model_tests.report in ("junit", "go-json"):
            reasons += _exit_agrees(with_model_tests, "run with the model's tests")
        elif with_model_tests.exit_code != 0:
            reasons.append("the run with the model's own tests failed with exit code "
                           f"{with_model_tests.exit_code}")
        if with_model_tests.timed_out:
            reasons.append("the run with the model's own tests timed out")
        checked, more = _run_checks(baseline, with_model_tests, "run with the model's tests")
        reasons += [r for r in checked if r not in reasons]
        flags += [f for f in more if f not in flags]
    return Verdict(accepted=not reasons, reasons=_capped(reasons), notes=notes,
                   new_tests=new_tests, mode=mode, flags=flags)
