"""Huge suites (issue 29 §1): fast rounds between the model's rounds, and a baseline that
alone exceeds the run's budget said plainly.

A suite past the threshold in solver/limits.py (`fast_rounds`) would spend most of a
run's budget running itself after every round. After an agent round that another round
can follow, the harness first runs, on the verdict's own tree (the base's tests
restored), only the test files that hold (a) the baseline's failing tests, (b) the test
files the change touches, and (c) the test modules that import a module the change
edits. A test there that fails and did not fail at baseline, or the baseline's failures
all still failing, goes back to the model as the round's feedback; otherwise the whole
suite runs, once, for the verdict, decided as ever (verdict.py): nothing about the
verdict is weaker, and no fast run can accept a change. The round after which the run
ends whatever the verdict (the last one, out of steps or time, the model's own stop)
goes straight to the whole suite.

The selection reaches pytest through the harness's pytest guard (a file in its
host-owned channel folder, read before any repository code runs), which leaves the
other files uncollected. A runner the guard does not load gets no fast round.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from solver.hostgit import GitError, HostRepo, run_git
from solver.verdict.repo_tests import TestVerdict

# The guard reads the files to run from this file beside its report (pytest_guard/).
SELECT_REQUEST = "frognano-select.json"
MAX_FILES = 20_000  # the guard keeps the same bound
# A selection holding more of the suite than this saves too little: the whole suite runs.
MAX_SHARE = 0.5
MAX_MODULES = 50  # changed modules looked up among the test files' imports
BAD = ("failed", "error")


@dataclass(frozen=True)
class Selection:
    """The test files a fast round runs, and how many of the baseline's tests they hold."""

    files: tuple[str, ...] = ()
    tests: int = 0
    of: int = 0  # the baseline's tests in all

    @property
    def worth(self) -> bool:
        """Whether running only these saves enough to be a round of its own."""
        return 0 < self.tests <= self.of * MAX_SHARE

    def to_dict(self) -> dict[str, object]:
        return {"files": list(self.files[:100]), "file_count": len(self.files),
                "tests": self.tests, "of": self.of}


def file_of(test_id: str) -> str | None:
    """The file part of a pytest id (`tests/test_a.py::test_b[1]` → `tests/test_a.py`)."""
    head, sep, _ = test_id.partition("::")
    return head if sep and head else None


def module_names(path: str) -> list[str]:
    """The dotted names a changed Python file may be imported by: its whole path and each
    shorter tail of two parts or more (`src/pkg/mod.py` → `src.pkg.mod`, `pkg.mod`); a
    package's `__init__.py` is the package; a top-level module is its own name."""
    if not path.endswith(".py"):
        return []
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    tails = [parts[i:] for i in range(len(parts)) if len(parts) - i >= min(2, len(parts))]
    return [".".join(tail) for tail in tails if all(p.isidentifier() for p in tail)]


_WORD_END = "([^A-Za-z0-9_]|$)"
_SPACE = "[[:space:]]"


def import_patterns(module: str) -> list[str]:
    """POSIX extended regexes (git grep -E) for a line importing `module`: `import m`,
    `from m import x` (and m's submodules), `from parent import leaf`."""
    found = [f"^{_SPACE}*(from|import){_SPACE}+{re.escape(module)}{_WORD_END}"]
    parent, _, leaf = module.rpartition(".")
    if parent:
        found.append(f"^{_SPACE}*from{_SPACE}+{re.escape(parent)}{_SPACE}+import{_SPACE}"
                     f"(.*[^A-Za-z0-9_])?{leaf}{_WORD_END}")
    return found


def importers(repo: HostRepo, tree: str, changed: list[str]) -> set[str]:
    """The Python files of `tree` with a line importing a module `changed` edits (one
    `git grep`; relative imports are not followed)."""
    modules = sorted({name for path in changed for name in module_names(path)})[:MAX_MODULES]
    if not modules:
        return set()
    args = [word for name in modules for pattern in import_patterns(name)
            for word in ("-e", pattern)]
    try:
        out = run_git("grep", "-l", "-I", "-E", *args, tree, "--", "*.py",
                      git_dir=repo.git_dir)
    except GitError:  # no line matched (exit 1), or git could not: (a) and (b) still hold
        return set()
    prefix = f"{tree}:"
    return {line.removeprefix(prefix) for line in out.decode("utf-8", "replace").splitlines()}


def select(baseline: TestVerdict, changed: list[str], importing: set[str]) -> Selection:
    """The files of the baseline's failing tests, the collected test files the change
    touches, and those that import what it edits; only files the baseline collected."""
    per_file = Counter(file_of(test) for test in baseline.tests)
    per_file.pop(None, None)
    failing = {file_of(t) for t, status in baseline.tests.items() if status in BAD}
    wanted = (failing | set(changed) | importing) & per_file.keys()
    files = tuple(sorted(f for f in wanted if f is not None))
    return Selection(files, sum(per_file[f] for f in files), len(baseline.tests))


def in_selection(baseline: TestVerdict, selection: Selection) -> TestVerdict:
    """The baseline as far as the fast round ran (what its feedback compares with)."""
    files = set(selection.files)
    tests = {t: s for t, s in baseline.tests.items() if file_of(t) in files}
    return TestVerdict(baseline.command, baseline.exit_code, baseline.timed_out,
                       baseline.seconds, baseline.output, tests, baseline.report)


def not_ready(baseline: TestVerdict, fast: TestVerdict) -> list[str] | None:
    """Why the whole suite need not run after this round: a test of the fast run that
    fails and did not fail at baseline, or every baseline failure still failing. None:
    the fast run tells nothing (no per-test report, timed out), the whole suite decides.
    An empty list: the whole suite runs for the verdict."""
    if fast.report != "junit" or fast.timed_out or not fast.tests:
        return None
    before = {t for t, status in baseline.tests.items() if status in BAD}
    now = {t for t, status in fast.tests.items() if status in BAD}
    reasons = [f"test {'fails' if fast.tests[t] == 'failed' else 'errors'}: {t}"
               for t in sorted(now - before)]
    if before and before <= now:
        reasons += [f"test still {'fails' if fast.tests[t] == 'failed' else 'errors'}: {t}"
                    for t in sorted(before)]
    return reasons


def note(selection: Selection) -> str:
    """What a fast round ran, for the model's feedback and the round's record."""
    return (f"This round ran part of the suite, which is large: {selection.tests:,} of its "
            f"{selection.of:,} tests, in the files of the tests that failed before and the "
            "test files the change touches or that import the code it changes. The whole "
            "suite runs for the verdict once these pass.")


def write_select_request(channel: Path, files: tuple[str, ...]) -> None:
    """The request, in the run's channel folder (host-owned, bound read-only)."""
    path = channel / SELECT_REQUEST
    path.write_text(json.dumps(list(files[:MAX_FILES])), encoding="utf-8")
    path.chmod(0o644)  # the sandbox's uid reads it


# pytest's own progress: `collected 100000 items`, and `[ 37%]` ending each line of dots.
_COLLECTED = re.compile(r"^collected (\d+) items?\b", re.MULTILINE)
_PERCENT = re.compile(r"\[\s*(\d{1,3})%\]\s*$", re.MULTILINE)


def reached(output: str) -> str:
    """How far a run stopped at its timeout had got, from pytest's progress lines (the
    report is written only at the end); said as unknown when the output does not say."""
    collected = [int(n) for n in _COLLECTED.findall(output)]
    percent = [int(n) for n in _PERCENT.findall(output)]
    if collected and percent:
        total, share = collected[-1], min(percent[-1], 100)
        return (f"it had reached about {total * share // 100:,} of its {total:,} tests "
                f"({share}%, pytest's progress)")
    if percent:
        return f"it had reached {min(percent[-1], 100)}% of its tests (pytest's progress)"
    if collected:
        return f"it had collected {collected[-1]:,} tests and finished none of them"
    if "collecting" in output:
        return "it had not finished collecting the tests"
    return "how far it had got is not in its output"


@dataclass(frozen=True)
class Budget:
    """What the baseline's run was given: the test timeout, or what was left of the
    run's wall time after setup when that was less."""

    timeout: float
    test_timeout: float
    max_seconds: float


def over_budget(baseline: TestVerdict, budget: Budget) -> str:
    """The baseline alone exceeds the run's budget, with its figures and the line that
    gives it more (harness.py stops before the model)."""
    if budget.timeout >= budget.test_timeout:
        which = (f"the test timeout of {budget.test_timeout:,.0f} s (the "
                 "`.github/frognano.yml` line `test_timeout_minutes:` gives it longer)")
    else:
        which = (f"the {budget.timeout:,.0f} s left of the run's {budget.max_seconds:,.0f} s "
                 "after setup (the `.github/frognano.yml` line `timeout_minutes:` gives the "
                 "run longer)")
    return (f"the baseline alone exceeds the run's budget: the repository's tests ran "
            f"{baseline.seconds:,.0f} s and were stopped at {which}; {reached(baseline.output)}"
            ", so no fix could be judged within the budget")
