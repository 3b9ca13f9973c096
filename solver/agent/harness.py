"""Our outer loop around Leaf's: the harness, not the model, decides when the work is done.

setup → baseline → agent → verdict → (the verdict's feedback to the model → agent → verdict)…
until the verdict accepts or a budget (steps, wall time, context, rounds) runs out. An
accepted change that no test shows fixes the issue (Verdict.verified) gets one more round
while rounds remain, asking for such a test; if that round ends worse, the accepted
change is the run's result.
The baseline and every verdict run in a fresh sandbox on a tree the host chose
(verdict_run.py); the verdict counts only the repository's original tests (verdict.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from sandbox.base import Sandbox, SandboxError
from sandbox.disk_quota import tree_bytes
from sandbox.egress import describe_refusals
from solver import service_report
from solver.agent.loop import LoopState, run_agent
from solver.agent.prompts import (
    SYSTEM_PROMPT,
    baseline_unusable_message,
    evidence_feedback_message,
    task_message,
    verdict_feedback_message,
)
from solver.agent.result import SolveResult
from solver.agent.run_events import (
    BaselineDone,
    EventOutput,
    Feedback,
    RunFinished,
    RunStarted,
    SetupDone,
    SetupStarted,
    TestsJudged,
    TestsStarted,
)
from solver.hostgit import GitError, HostRepo, Snapshot
from solver.limits import Limits, fast_rounds
from solver.models.base import ModelClient
from solver.setup import venv_cache
from solver.setup.installer import FALLBACK_NOTE, fell_back
from solver.setup.project_files import Reader, bytes_reader
from solver.setup.setup_hints import (
    missing_module_hint,
    pytest_version_problem,
    setup_failure_hint,
    usage_hint,
)
from solver.verdict.huge_suite import Budget, in_selection, not_ready, note, over_budget
from solver.verdict.repo_tests import TestVerdict, compare_results
from solver.verdict.verdict import Verdict
from solver.verdict.verdict_run import Judgement, SandboxFactory, VerdictRunner

__all__ = ["Harness", "Limits", "RunPlan", "SolveResult", "baseline_problem", "solve"]

# Inner exits after which another round makes sense if the tests still fail.
_RETRYABLE_EXITS = ("agent", "max_tokens_per_turn")
# What a broken sandbox or host git raises while the harness runs the tests.
_TEST_RUN_FAILURES = (SandboxError, GitError, OSError)
_DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class RunPlan:
    """What one run is asked to do (solver/run.py prepares it)."""

    issue: str
    test_command: str
    limits: Limits = field(default_factory=Limits)
    setup_command: str | None = None
    setup_note: str = ""  # how the setup command was chosen, when it was inferred
    guidance: str = ""  # a maintainer's words from `/frognano retry`


_FIRST_ERROR = re.compile(r"^E\s+(\S*(?:Error|Exception)\b.*)$|^(\S*Error: .*)$", re.MULTILINE)


def baseline_problem(baseline: TestVerdict, setup_command: str | None = None,
                     read: Reader | None = None) -> str | None:
    """Why the baseline cannot serve as one (the agent would fix nothing), or None; with
    the `.github/frognano.yml` line that would fix it where the cause says which
    (setup_hints.py). `read` gives the base tree's files (its pytest configuration)."""
    if baseline.timed_out:
        return "the baseline test run timed out"
    if baseline.exit_code in (126, 127):
        what = "was not found" if baseline.exit_code == 127 else "cannot be executed"
        return (f"the test command `{baseline.command}` {what} (exit {baseline.exit_code})"
                + missing_module_hint(baseline.output, setup_command))
    too_old = pytest_version_problem(baseline.output, read, setup_command)
    if too_old:
        return too_old
    pytest_like = baseline.report == "junit" or "pytest" in baseline.command
    crashed = pytest_failed(baseline, setup_command) if pytest_like else None
    if crashed:
        return crashed
    collect_errors = [t for t, s in baseline.tests.items() if s == "error" and "::" not in t]
    if pytest_like and (baseline.exit_code in (2, 3, 4, 5) or collect_errors):
        found = _FIRST_ERROR.search(baseline.output)
        detail = next((g for g in found.groups() if g), "") if found else ""
        usage, hint = usage_hint(baseline.output, setup_command) \
            if baseline.exit_code == 4 else ("", "")
        detail = detail or usage
        hint = hint or missing_module_hint(baseline.output, setup_command)
        where = f" in {', '.join(collect_errors[:3])}" if collect_errors else ""
        kind = "no tests were collected" if baseline.exit_code == 5 else \
            "the tests could not be collected"
        return (f"{kind}{where} (pytest exit {baseline.exit_code}"
                + (f": {detail.strip()[:200]}" if detail else "") + ")" + hint)
    return None


# pytest's last line when its session ran to the end: `=== 1 failed, 2 passed in 0.12s ===`
# (`-q`: without the `=`), `no tests ran in 0.01s`.
_SESSION_SUMMARY = re.compile(r"^=*\s*(?:no tests ran|\d+ \w+(?:, \d+ \w+)*) in "
                              r"\d+(?:\.\d+)?s\b", re.MULTILINE)
_FAILED_HOW = {1: ": an exception outside any test, such as a plugin's or conftest.py's "
                  "at startup", 3: ": an internal error"}


def pytest_failed(baseline: TestVerdict, setup_command: str | None = None) -> str | None:
    """Why a baseline is no baseline when pytest itself failed: no report came, the exit
    status is not 0 and pytest never printed its session's summary (a plugin or
    conftest.py raising at startup or in a session hook: exit 1; an internal error: 3).
    Judging such a run by its exit status would take "pytest crashed" for "the tests
    fail". Usage and collection errors (exit 2, 4, 5) have their own words
    (`baseline_problem`); a run that printed its summary ran its tests."""
    if baseline.report != "none" or baseline.exit_code in (0, 2, 4, 5) \
            or _SESSION_SUMMARY.search(baseline.output):
        return None
    code = "killed" if baseline.exit_code is None else f"exit {baseline.exit_code}"
    how = _FAILED_HOW.get(baseline.exit_code or 0, "")
    return (f"pytest itself failed before it wrote its report ({code}{how}), so no test "
            f"result is known; the last lines of its output: {last_lines(baseline.output)}"
            + missing_module_hint(baseline.output, setup_command))


def last_lines(output: str, count: int = 4, width: int = 160) -> str:
    """The last `count` lines of `output` that hold text, each cut to `width`, quoted."""
    lines = [line.strip() for line in output.splitlines() if line.strip()][-count:]
    return " / ".join(f"«{line[:width]}»" for line in lines) or "(none)"


def solve(model: ModelClient, sandbox: Sandbox, issue: str, test_command: str,
          events: EventOutput, *, repo: HostRepo, limits: Limits = _DEFAULT_LIMITS,
          setup_command: str | None = None, setup_note: str = "", guidance: str = "",
          should_stop: Callable[[], bool] = lambda: False,
          open_verdict_sandbox: SandboxFactory | None = None,
          scratch_dir: Path | None = None) -> SolveResult:
    """`Harness(...).run(RunPlan(...))` with the plan spelled out as arguments."""
    plan = RunPlan(issue, test_command, limits, setup_command, setup_note, guidance)
    return Harness(model, sandbox, repo, events, should_stop=should_stop,
                   open_verdict_sandbox=open_verdict_sandbox, scratch_dir=scratch_dir).run(plan)


class Harness:
    """One run: setup, baseline, then agent rounds each judged by a verdict run.

    `scratch_dir` holds the harness's own test trees (default: next to the sandbox's
    private dir); it must be reachable by the sandbox uid, like the workspace.
    """

    def __init__(self, model: ModelClient, sandbox: Sandbox, repo: HostRepo,
                 events: EventOutput, *, should_stop: Callable[[], bool] = lambda: False,
                 open_verdict_sandbox: SandboxFactory | None = None,
                 scratch_dir: Path | None = None) -> None:
        self.model, self.sandbox, self.repo, self.events = model, sandbox, repo, events
        self.should_stop = should_stop
        private_dir: Path = sandbox.config.private_dir  # type: ignore[attr-defined]
        self.scratch = scratch_dir or private_dir.parent / "harness"
        self.open_verdict_sandbox = open_verdict_sandbox

    def run(self, plan: RunPlan) -> SolveResult:
        self.plan, limits = plan, plan.limits
        self.started = time.monotonic()
        self.deadline = self.started + limits.max_seconds
        # What the agent's sandbox started (its runner is up: solver/run.execute entered it).
        self.services = service_report.started(getattr(self.sandbox, "started_services", ()))
        task = task_message(plan.issue, plan.test_command, plan.guidance, self.services)
        self.state = LoopState(messages=[{"role": "system", "content": SYSTEM_PROMPT},
                                         {"role": "user", "content": task}])
        self.runner = VerdictRunner(self.sandbox, self.repo, plan.test_command, self.scratch,
                                    open_sandbox=self.open_verdict_sandbox)
        self.judged: Judgement | None = None  # the verdict on the tree as it is now, if any
        # The latest accepted round's verdict, kept while the model is asked for a test
        # that reproduces the issue: a later round that ends worse never loses it.
        self.accepted: Judgement | None = None
        self.asked_for_evidence: str | None = None  # the tree when it was last asked
        self.agent_ran = False  # only an agent phase can have changed the venv's hooks
        self.events.emit(RunStarted(
            model=self.model.name, test_command=plan.test_command,
            setup_command=plan.setup_command, setup_note=plan.setup_note,
            limits=limits.model_dump(),
            sampling=getattr(getattr(self.model, "sampling", None), "__dict__", None),
            seed=getattr(self.model, "seed", None), task=task,
            services=tuple(self.services)))

        setup_failure = self._setup()
        if setup_failure:
            return self._finish("setup_failed", None, 0, error=setup_failure)
        self.events.emit(TestsStarted(phase="baseline", command=plan.test_command))
        try:
            cache = self.setup_cache  # its entry's venv, linked: no copy of it here
            self.runner.capture_setup(cache.link_venv if cache is not None else None)
            budget = self._baseline_budget()
            baseline = self.runner.baseline(budget.timeout)
        except _TEST_RUN_FAILURES as exc:
            return self._finish("tool_error", None, 0,
                                error=f"the sandbox failed running the baseline tests: {exc}")
        self.events.emit(BaselineDone(tests=baseline))
        # Stopped at its timeout, the baseline alone is over the budget: said with figures.
        problem = over_budget(baseline, budget) if baseline.timed_out else baseline_problem(
            baseline, plan.setup_command, bytes_reader(self.repo.read_base))
        if problem:
            return self._finish("baseline_unusable", baseline, 0,
                                error=baseline_unusable_message(problem, baseline.output))
        return self._rounds(baseline)

    def _setup(self) -> str:
        """Run the setup command (the only phase with network) on the tree the host chose
        for it (`HostRepo.distrust_setup`), then hand the agent phase the run's real start
        (`HostRepo.finish_setup`); why either failed, or ""."""
        command, note = self.plan.setup_command or "", self.plan.setup_note
        setup, self.setup_cache = None, None
        if command:
            self.events.emit(SetupStarted(command=command))
            limits = self.plan.limits
            # The setup cache (venv_cache.py): a hit restores what this setup made before.
            cache = self.setup_cache = venv_cache.for_run(self.sandbox, self.repo, command)
            setup = cache.restore() if cache is not None else None
            try:
                setup = setup or self.sandbox.exec(
                    command, network=True, timeout=min(limits.setup_timeout, limits.max_seconds))
            except SandboxError as exc:  # e.g. the disk quota ended it: the run ends named
                return f"setup command `{command}` was stopped by the sandbox: {exc}"
            if cache is not None and setup.ok:  # before the agent phase can touch the venv
                setup = cache.store(setup)
            if fell_back(setup.stdout):  # uv failed, pip ran: the note says so (installer.py)
                note += FALLBACK_NOTE
                self.plan = replace(self.plan, setup_note=note)
        if setup is not None and not setup.ok:
            self.events.emit(SetupDone(command=command or "", note=note, result=setup))
            how = "timed out" if setup.timed_out else f"failed with exit code {setup.exit_code}"
            return (f"setup command `{command}` {how}" + (f" ({note})" if note else "")
                + setup_failure_hint(command, setup.stdout + setup.stderr,
                                     bytes_reader(self.repo.read_base))) \
                + describe_refusals(setup.network_log)
        try:
            writes = self.repo.finish_setup()
        except GitError as exc:  # e.g. setup left more nested repositories than are read
            return f"the tree the setup phase left could not be read: {exc}"
        if setup is not None:
            self.events.emit(SetupDone(command=command or "", note=note, result=setup,
                                       writes=writes))
        return ""

    def _rounds(self, baseline: TestVerdict) -> SolveResult:
        """Agent, verdict, feedback, until the verdict accepts or a budget runs out."""
        limits, rounds = self.plan.limits, 0
        while True:
            self.judged = None  # the agent is about to change the tree
            exit_reason = self._agent(rounds)
            rounds += 1
            if exit_reason in ("cancelled", "tool_error"):
                # Nothing to verify: the run was stopped, or the sandbox itself is broken.
                return self._finish(self._kept(exit_reason), baseline, rounds)
            self.events.emit(TestsStarted(phase="after", command=self.plan.test_command,
                                          round=rounds))
            timeout = max(1.0, min(limits.test_timeout,
                                   self.deadline - time.monotonic() + 60))
            try:
                fast = self._fast_round(baseline, exit_reason, rounds, timeout)
                if fast is not None:  # a huge suite's fast round sends the model back
                    self.state.messages.append({"role": "user", "content": fast})
                    self.events.emit(Feedback(round=rounds, content=fast))
                    continue
                judged = self.judged = self._judge(baseline, timeout)
            except _TEST_RUN_FAILURES as exc:
                self.state.last_error = f"the sandbox failed running the tests: {exc}"
                return self._finish(self._kept("tool_error"), baseline, rounds)
            self.events.emit(TestsJudged(round=rounds, exit_reason=exit_reason,
                                         tests=judged.final, verdict=judged.verdict,
                                         model_tests=judged.with_model_tests))
            stop = self._stop_reason(exit_reason, judged.verdict, rounds)
            if stop == "tests_passed" and self._ask_for_evidence(exit_reason, judged, rounds):
                self.accepted = judged
                self.asked_for_evidence = judged.snapshot.tree
                feedback = evidence_feedback_message(rounds, limits.max_rounds - rounds - 1)
            elif stop:
                return self._finish(self._kept(stop), baseline, rounds)
            else:
                # The rules and the failing tests' ids, never which check did not accept:
                # the full reasons are in the TestsJudged record, for people.
                feedback = verdict_feedback_message(
                    self.plan.test_command, judged.verdict, baseline, judged.final,
                    rounds, limits.max_rounds - rounds - 1)
            self.state.messages.append({"role": "user", "content": feedback})
            self.events.emit(Feedback(round=rounds, content=feedback))

    def _baseline_budget(self) -> Budget:
        """The baseline's timeout: the test timeout, or what is left of the run's wall
        time after setup when that is less (a baseline never outlives the run)."""
        limits = self.plan.limits
        left = max(1.0, self.deadline - time.monotonic())
        return Budget(min(limits.test_timeout, left), limits.test_timeout, limits.max_seconds)

    def _fast_round(self, baseline: TestVerdict, exit_reason: str, rounds: int,
                    timeout: float) -> str | None:
        """A huge suite's fast round (huge_suite.py): the feedback that sends the model
        back before a run of the whole suite, or None: the whole suite judges this round
        (a smaller suite, a runner without the guard, the round after which the run ends
        whatever the verdict, a round after an accepted one, or nothing worth running)."""
        if (self.accepted is not None or baseline.guard is None or baseline.report != "junit"
                or not fast_rounds(len(baseline.tests), baseline.seconds)
                or self._stop_reason(exit_reason, Verdict(accepted=False), rounds)):
            return None
        self.sandbox.stop()
        ran = self.runner.fast_round(baseline, self.repo.snapshot(), timeout)
        reasons = not_ready(baseline, ran[0]) if ran is not None else None
        if ran is None or not reasons:
            return None
        fast, selection = ran
        verdict = Verdict(accepted=False, reasons=reasons, notes=[note(selection)])
        self.events.emit(TestsJudged(round=rounds, exit_reason=exit_reason, tests=fast,
                                     verdict=verdict, model_tests=None,
                                     fast_round=selection.to_dict()))
        left = self.plan.limits.max_rounds - rounds - 1
        return note(selection) + "\n\n" + verdict_feedback_message(
            self.plan.test_command, verdict, in_selection(baseline, selection), fast, rounds,
            left)

    def _judge(self, baseline: TestVerdict, timeout: float) -> Judgement:
        """The verdict on the stopped sandbox's tree; the accepted round's own when the
        model left that tree as it was (its tests ran on exactly this tree)."""
        if self.accepted is None:
            return self.runner.judge(baseline, timeout)
        self.sandbox.stop()
        snapshot = self.repo.snapshot()
        if snapshot.tree == self.accepted.snapshot.tree:
            return self.accepted
        return self.runner.judge_snapshot(baseline, snapshot, timeout)

    def _ask_for_evidence(self, exit_reason: str, judged: Judgement, rounds: int) -> bool:
        """An accepted change that no test shows fixes the issue gets another round, while
        rounds and budgets remain, unless the model already left it as it was when asked."""
        limits = self.plan.limits
        return (not judged.verdict.verified and exit_reason in _RETRYABLE_EXITS
                and rounds < limits.max_rounds and self.state.steps < limits.max_steps
                and time.monotonic() < self.deadline
                and judged.snapshot.tree != self.asked_for_evidence)

    def _kept(self, reason: str) -> str:
        """Why the run ends, after a round that ended worse than an accepted one: the
        accepted round's change is the run's result (never lost to a later round)."""
        judged = self.judged
        if self.accepted is None or reason == "cancelled" or (
                judged is not None and judged.verdict.accepted):
            return reason
        self.judged = self.accepted
        return "tests_passed"

    def _agent(self, round_index: int) -> str:
        limits = self.plan.limits
        self.agent_ran = True
        try:
            return run_agent(self.model, self.sandbox, self.state, limits, self.events,
                             round_index=round_index, deadline=self.deadline,
                             should_stop=self.should_stop)
        except SandboxError as exc:  # the sandbox died outside a tool call
            self.state.last_error = str(exc)
            return "tool_error"

    def _stop_reason(self, exit_reason: str, verdict: Verdict, rounds: int) -> str | None:
        """Why the run ends after this verdict, or None to send the model back."""
        limits = self.plan.limits
        if verdict.accepted:
            return "tests_passed"
        out_of_rounds = rounds >= limits.max_rounds
        if exit_reason not in _RETRYABLE_EXITS or (out_of_rounds and exit_reason != "agent"):
            return exit_reason
        if out_of_rounds:
            return "max_rounds"
        if self.state.steps >= limits.max_steps:
            return "max_turns"
        if time.monotonic() >= self.deadline:
            return "max_time"
        return None

    def _snapshot(self) -> tuple[Snapshot | None, str]:
        """The judged tree, else a fresh snapshot of the stopped sandbox; and a problem."""
        if self.judged is not None:
            return self.judged.snapshot, ""
        try:
            self.sandbox.stop()  # nothing may still be writing the tree the host snapshots
            # A command the disk quota killed may have left far more than the quota: a
            # sparse file costs nothing to make, and git would read and store every byte.
            limits = getattr(getattr(self.sandbox, "config", None), "limits", None)
            if limits is not None and tree_bytes([self.repo.work_tree]) > limits.disk_bytes:
                return None, (f"the workspace is over the disk quota of "
                              f"{limits.disk_bytes / 1024**2:.0f} MiB; the host did not "
                              "read it")
            return self.repo.snapshot(), ""
        except (SandboxError, GitError) as exc:
            return None, f"could not compute the diff: {exc}"

    def _finish(self, reason: str, baseline: TestVerdict | None, rounds: int,
                error: str = "") -> SolveResult:
        judged, state = self.judged, self.state
        snapshot, snapshot_problem = self._snapshot()
        final = judged.final if judged else None
        verdict = judged.verdict if judged else None
        warnings = list(verdict.reasons if verdict and not verdict.accepted else [])
        warnings += verdict.flags if verdict else []  # loud even when accepted
        # Against the venv as setup left it (capture_setup), and only once the model ran:
        # pip's and setuptools' own hooks are setup's, and a failed setup has no copy.
        warnings += [f"the agent phase added or changed a start-up hook in the venv: {p} "
                     "(the verdict ran with the venv as setup left it)"
                     for p in (self.runner.venv_changes() if self.agent_ran else [])]
        warnings += [f"setup built a file the test runs did not get: {p}"
                     for p in self.runner.builds.left_out[:10]]
        warnings += [f"both the setup phase and the agent phase changed `{p}`: the change "
                     "keeps the agent's version" for p in (snapshot.setup_overlap
                                                           if snapshot else [])]
        problems = [error or state.last_error, snapshot_problem]
        result = SolveResult(
            exit_reason=reason, tests_passed=bool(verdict and verdict.accepted),
            diff=snapshot.diff if snapshot else "", test_command=self.plan.test_command,
            baseline=baseline, final=final, rounds=rounds, steps=state.steps,
            usage=state.usage, seconds=time.monotonic() - self.started,
            changes=compare_results(baseline.tests if baseline else {},
                                    final.tests if final else {}),
            suspicious=warnings, test_files_changed=judged.plan.model_tests if judged else [],
            tool_calls=state.tool_calls, error="; ".join(p for p in problems if p),
            snapshot=snapshot, verdict=verdict,
            with_model_tests=judged.with_model_tests if judged else None,
            setup_command=self.plan.setup_command, setup_note=self.plan.setup_note,
            summary=state.last_answer, services=self.services)
        self.events.emit(RunFinished(result=result))
        return result
