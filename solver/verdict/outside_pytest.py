"""The failing tests once more, outside pytest: code that passes only under the runner.

When the verdict accepts a change, the tests that failed at baseline are run again in
the verdict's tree, in a fresh sandbox, by plain python (plain_runner.py): the test
module imported and its tests called as pytest would call them (parameter sets, the
base's fixtures, doctests, Django's settings). No pytest module is in `sys.modules` while
repository code runs, `__main__` is not pytest's and no report path is in the
environment, so code that special-cases the runner behaves as it would in use. A test
that passed under pytest and fails, errors, skips itself or gives no result here refuses
the change. A test the runner cannot run faithfully (its own decision, with the reason)
refuses nothing: the reviewer reads "could not run outside pytest" in the notes.

Results come back over a FIFO in the harness's read-only channel folder, opened by the
runner before any repository code runs and written once, with a token read from stdin;
each test module runs in a child process that reports to its parent over an inherited
pipe. Code that knows this runner can still forge its answer from inside (README:
residual risk); what it cannot do is pass by the runner's absence.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.trees import remove_tree
from solver.verdict.django_tests import django_settings
from solver.verdict.junit_report import ReportPipe
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.verdict import BAD, Verdict

if TYPE_CHECKING:
    from solver.verdict.verdict_run import VerdictRunner

RUNNER = Path(__file__).with_name("plain_runner.py")
# A test id the runner is given: a relative file inside the tree, then what pytest named
# in it (`function`, `Class::method`, either with `[parameters]`, a doctest's name).
TEST_ID = re.compile(r"^([^:\[\]/][^:\[\]]*)::(\S.*)$")
RESULT_MAX_BYTES = 4 * 1024 * 1024
DISAGREES = "test passes under pytest but not outside it: "
# The runner's statuses: its own decision not to run a test, and what disagrees.
CANNOT = "cannot run"
WHAT = {"skipped": "skipped itself", "failed": "failed", "error": "errored"}
COULD_NOT = "could not run outside pytest: "
MAX_TESTS = 200
MAX_NOTED = 10  # "could not run" notes, then a count of the rest


@dataclass
class PlainRun:
    """What the plain run said of each test it was given."""

    results: dict[str, str] = field(default_factory=dict)  # test id → status
    details: dict[str, str] = field(default_factory=dict)  # test id → why it failed
    problem: str = ""  # the run itself could not be read: refuses too
    exits: dict[str, object] = field(default_factory=dict)  # test file → its exit code


def addressable(test: str) -> bool:
    """A test id the runner can be given: a file inside the tree, no `..`."""
    found = TEST_ID.match(test)
    return bool(found) and ".." not in found.group(1).split("/")  # type: ignore[union-attr]


def targets(baseline: TestVerdict, final: TestVerdict) -> list[str]:
    """Test ids that failed at baseline and pass under pytest now."""
    return sorted(t for t, s in baseline.tests.items()
                  if s in BAD and final.tests.get(t) == "passed")[:MAX_TESTS]


def _command(runner: Path, spec: dict[str, Any]) -> str:
    """`exec` drops the shell, so the spec (the FIFO and the token) is in no process's
    command line once the runner reads it from stdin."""
    return (f"exec python3 {shlex.quote(str(runner))} <<'FROGNANO_PLAIN'\n"
            f"{json.dumps(spec)}\nFROGNANO_PLAIN\n")


def run_plain(runner: VerdictRunner, tree: str, tests: list[str], timeout: float
              ) -> PlainRun:
    """The tests run by plain python in `tree`, in a fresh sandbox built as the
    verdict's own (the private area as setup left it)."""
    runner.runs += 1
    # No "pytest" in the path: it is the runner's, seen in `__main__` and `sys.orig_argv`.
    where = runner.scratch / f"{runner.runs:02d}-plain-run"
    workspace, private, channel = where / "workspace", where / "private", where / "channel"
    runner.materialize(tree, workspace)
    venv = runner.fresh_private(private)
    channel.mkdir(mode=0o755)
    shutil.copy(RUNNER, channel / RUNNER.name)
    token = secrets.token_hex(16)
    pipe = ReportPipe(channel / f"{secrets.token_hex(8)}.plain", RESULT_MAX_BYTES)
    spec = {"report": str(pipe.path), "token": token,
            "tests": [test.split("::", 1) for test in tests]}  # addressable()
    # A suite Django's own runner runs: its tests here with the settings it names.
    settings = django_settings(runner.test_command, workspace)
    if settings is not None:
        spec["django_settings"] = settings
    config = dataclasses.replace(runner.config, workspace=workspace, private_dir=private,
                                 extra_ro_binds=[*runner.config.extra_ro_binds, channel],
                                 venv_ro=venv)
    try:
        with runner.open_sandbox(config) as fresh:
            done = fresh.exec(_command(channel / RUNNER.name, spec), timeout=timeout)
    finally:
        writes = pipe.close()
        remove_tree(where)
    if done.timed_out:
        return PlainRun(problem="it timed out")
    return _read(writes, pipe.oversize, token, tests)


def _read(writes: list[bytes], oversize: bool, token: str, tests: list[str]) -> PlainRun:
    if oversize or len(writes) != 1:
        return PlainRun(problem=f"its results were written {len(writes)} times or "
                                "oversize: something besides its runner wrote them")
    try:
        said = json.loads(writes[0])
    except ValueError:
        said = None
    if not isinstance(said, dict) or said.get("token") != token:
        return PlainRun(problem="its results are unreadable or not its runner's")
    run = PlainRun()
    for module in said.get("modules") or []:
        _read_module(run, module)
    for test in tests:
        run.results.setdefault(test, "no result")
    return run


def _read_module(run: PlainRun, module: dict[str, Any]) -> None:
    """A child's lines: the first result per test counts; more than one is forged."""
    file = str(module.get("file", ""))
    for line in str(module.get("lines", "")).splitlines():
        try:
            entry = json.loads(line)
            test = f"{file}::{entry['test']}"
            status, detail = str(entry["status"]), str(entry.get("detail", ""))
        except (ValueError, KeyError, TypeError):
            run.problem = run.problem or f"{file} wrote something besides its results"
            continue
        if test in run.results:
            run.problem = run.problem or f"{test} was reported more than once"
            continue
        run.results[test], run.details[test] = status, detail
    run.exits[file] = module.get("exit_code")


def disagreements(run: PlainRun) -> list[str]:
    """Refusal reasons, for people (the model is told the rules, not this)."""
    if run.problem:
        return [f"the failing tests, run again outside pytest, could not be judged: "
                f"{run.problem}"]
    reasons = []
    for test, status in sorted(run.results.items()):
        if status in ("passed", CANNOT):
            continue
        detail = run.details.get(test, "")
        if status == "no result":
            what = (f"gave no result (its process ended with exit code "
                    f"{run.exits.get(test.split('::')[0])} before it reported)")
        else:  # a skip is the test's own outcome here: it did not pass
            what = WHAT.get(status, "failed")
        reasons.append(f"{DISAGREES}{test} {what} when "
                       "its module is run by plain python" + (f" ({detail[:200]})"
                                                             if detail else ""))
    return reasons


DISAGREEING = re.compile(re.escape(DISAGREES) + r"(.+?) (?:failed|errored|skipped itself|"
                         r"gave no result(?: \([^)]*\))?) when its module is run by plain "
                         r"python")


def disagreeing_tests(reasons: list[str]) -> list[str]:
    """The test ids of this check's refusals."""
    return [found.group(1) for r in reasons if (found := DISAGREEING.match(r))]


def could_not_run(run: PlainRun, unaddressed: list[str]) -> list[str]:
    """Notes for the reviewer: each test the runner could not run, and why (bounded)."""
    skipped = [(t, run.details.get(t, "")) for t, s in sorted(run.results.items())
               if s == CANNOT] + [(t, "its id names no file in the tree") for t in unaddressed]
    notes = [f"{COULD_NOT}`{test}` ({why[:200]})" for test, why in skipped[:MAX_NOTED]]
    if len(skipped) > MAX_NOTED:
        notes.append(f"{COULD_NOT}{len(skipped) - MAX_NOTED} more test(s)")
    return notes


def check_outside_pytest(runner: VerdictRunner, tree: str, baseline: TestVerdict,
                         final: TestVerdict, verdict: Verdict, timeout: float) -> None:
    """Refuse an accepted verdict whose fixed tests pass only under pytest."""
    tests = targets(baseline, final) if verdict.accepted else []
    if not tests:
        return
    given = [t for t in tests if addressable(t)]
    run = run_plain(runner, tree, given, timeout) if given else PlainRun()
    reasons = disagreements(run)
    unaddressed = [t for t in tests if t not in given]
    ran = sum(s != CANNOT for s in run.results.values())
    said = "they disagree" if reasons else "they agree" if ran else "none judged"
    verdict.notes.append(f"the {len(tests)} test(s) that failed before were run again "
                         f"outside pytest (plain python, {ran} run, "
                         f"{len(tests) - ran} could not be): {said}")
    verdict.notes.extend(could_not_run(run, unaddressed))
    if reasons:
        verdict.accepted = False
        verdict.reasons.extend(reasons)
