"""The verdict on a change replayed after its run: a review's change merged onto a PR
branch a person pushed to meanwhile (workers/publish/review.py merges it and pushes).

The verdict stays the solver's: the tree is judged by the run's `VerdictRunner` rules, in
sandboxes built from the run's own recipe (solver/sandbox_recipe.py: its test services,
its package index), with the private area as the run's setup left it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from solver.agent.run_events import Event, EventOutput
from solver.hostgit import HostRepo, Snapshot
from solver.sandbox_recipe import SandboxRecipe
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.verdict_run import Judgement, VerdictRunner

log = logging.getLogger(__name__)

# The verdict on a replayed tree: (the run's repository with the new head as its base, the
# merged tree) → the judgement, as for the run itself.
JudgeReplay = Callable[[HostRepo, str], Judgement]


@dataclass(frozen=True, kw_only=True)
class ReplayJudged(Event):
    """The tests re-run on a review's change replayed on the PR branch's moved head, before
    its push. Recorded after the run's `result`: the run's transcript is appended to and
    the run record gets it as an event, so the dashboard shows what the push was judged
    on."""

    kind: ClassVar[str] = "replay"
    head: str  # the moved head the change was replayed on
    baseline: TestVerdict  # the new head's own test run
    judgement: Judgement
    seconds: float  # the whole re-judging: baseline, the tests, the model's tests
    test_runs: int

    def fields(self) -> dict[str, Any]:
        judged = self.judgement
        return {"head": self.head, **judged.final.to_dict(),
                "verdict": judged.verdict.to_dict(), "baseline": self.baseline.to_dict(),
                "model_tests": judged.with_model_tests.to_dict()
                if judged.with_model_tests else None,
                "replay_seconds": round(self.seconds, 3), "test_runs": self.test_runs}


@dataclass(frozen=True)
class Replay:
    """What a replay needs of its run: the run's host (its run directory holds the private
    area and the harness's copy of it), its test command and timeout, its recipe."""

    host: HostRepo
    test_command: str
    test_timeout: float
    recipe: SandboxRecipe

    def judge(self, events: EventOutput) -> JudgeReplay:
        """Fresh sandboxes from the run's recipe, a baseline of the new head, then
        `VerdictRunner.judge_snapshot`: the same restore of test files, the same rules.
        Each re-run goes to `events` as a `ReplayJudged`, and to the log."""
        return lambda at_head, tree: self._judge(at_head, tree, events)

    def _judge(self, at_head: HostRepo, tree: str, events: EventOutput) -> Judgement:
        started = time.monotonic()
        runner = VerdictRunner(None, at_head, self.test_command,
                               self.host.work_tree.parent / "harness",
                               config=self.recipe.config(self.host),
                               open_sandbox=self.recipe.open)
        baseline = runner.baseline(self.test_timeout)
        snapshot = Snapshot(base=at_head.base, tree=tree, diff="",
                            paths=at_head.changed_paths(tree), links=at_head.links(tree))
        judged = runner.judge_snapshot(baseline, snapshot, self.test_timeout)
        seconds = time.monotonic() - started
        events.emit(ReplayJudged(head=at_head.base, baseline=baseline, judgement=judged,
                                 seconds=seconds, test_runs=runner.runs))
        log.info("the change replayed on %s: tests %s, %s (%.1f s for %d test runs)",
                 at_head.base[:12], judged.final.summary(),
                 "accepted" if judged.verdict.accepted else "refused", seconds, runner.runs)
        return judged
