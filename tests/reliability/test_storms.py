"""Scenario 4: storms. 50 label and `/frognano retry` deliveries for 10 issues within
2 seconds, on two run workers. At most one run per issue at any moment, and a consistent
final state: one status comment per issue, at most one open PR per branch, published by
the newest run."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from runstore.store import Run, RunStore
from tests.reliability.conftest import Recorder
from tests.reliability.stack import (
    OWNER,
    Stack,
    StackOptions,
    running_stack,
    slow_fix_script,
    wait_for,
)
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

ISSUES = 10
DELIVERIES = 50
WINDOW_S = 2.0
REPO = "calc-storm"
# A short pause in the middle gives an older run the chance to be superseded mid-run.
SCRIPT = slow_fix_script("sleep 1; ls")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("storm"),
                       StackOptions(SCRIPT, run_workers=2)) as stack:
        stack.add_calc_repo(REPO, issues=ISSUES)
        yield stack


def storm_plan(seed: int = 6) -> list[tuple[str, int]]:
    """DELIVERIES (kind, issue) pairs: every issue gets a label first, the rest is mixed."""
    rng = random.Random(seed)
    rest = [(rng.choice(["label", "retry"]), rng.randint(1, ISSUES))
            for _ in range(DELIVERIES - ISSUES)]
    return [("label", n) for n in range(1, ISSUES + 1)] + rest


def overlapping_runs(runs: list[Run]) -> list[tuple[int, int]]:
    """Run-number pairs of one issue whose [started, finished] intervals overlap."""
    spans = sorted((r.started_at or 0, r.finished_at or float("inf"), r.run_number) for r in runs)
    found, latest_end, latest_number = [], float("-inf"), 0
    for start, end, number in spans:
        if start < latest_end:
            found.append((latest_number, number))
        if end > latest_end:
            latest_end, latest_number = end, number
    return found


def test_storm(stack: Stack, scorecard: Recorder) -> None:
    record = scorecard("4-storm", "Storm (50 label and retry deliveries, 10 issues, 2 s)",
                       "at most one active run per issue at any moment; each issue ends with "
                       "one status comment and at most one open PR, published by its newest "
                       "run")
    plan = storm_plan()
    started = time.monotonic()
    answers = [(stack.label(REPO, n) if kind == "label" else stack.retry(REPO, n, "maintainer")
                ).status_code for kind, n in plan]
    sent_in = time.monotonic() - started
    per_issue = Counter(n for _, n in plan)

    def settled() -> bool:
        return all(f"(run {per_issue[n]})" in stack.status(REPO, n)
                   and "opened a draft" in stack.status(REPO, n) for n in per_issue)

    wait_for(settled, timeout=150, message="every issue's newest run to open its PR")
    store = RunStore(f"sqlite:///{stack.state / 'frognano.db'}", migrate=False)
    wait_for(lambda: not store.list_runs(status="running", limit=1), timeout=30,
             message="no run still running")
    time.sleep(1)  # a late duplicate would show up now
    settled_in = time.monotonic() - started
    runs = store.list_runs(repo=f"{OWNER}/{REPO}", limit=1000)
    store.close()
    with stack.redis.client() as redis:
        generations = {n: int(redis.get(f"frognano:generation:{OWNER}/{REPO}#{n}") or 0)
                       for n in per_issue}
    pulls = [p for p in stack.fake.pulls(OWNER, REPO) if p.state == "open"]
    by_branch = Counter(p.head for p in pulls)
    overlaps = {n: overlapping_runs([r for r in runs if r.issue == str(n)]) for n in per_issue}
    publishers = {n: [r.run_number for r in runs if r.issue == str(n) and r.outcome == "pr_opened"]
                  for n in per_issue}
    record.observed = {
        "deliveries": len(plan), "seconds to send": sent_in,
        "answered 202": answers.count(202), "runs started": len(runs),
        "runs superseded mid-run": sum(r.outcome == "superseded" for r in runs),
        "overlapping runs of one issue": sum(map(len, overlaps.values())),
        "status comments per issue": sorted({len(stack.status_comments(REPO, n))
                                             for n in per_issue}),
        "open PRs": len(pulls), "seconds to settle": settled_in}
    assert sent_in < WINDOW_S, "the storm must fit its window"
    assert answers.count(202) == DELIVERIES
    assert all(not pairs for pairs in overlaps.values()), overlaps
    assert all(len(stack.status_comments(REPO, n)) == 1 for n in per_issue)
    assert len(pulls) == ISSUES and max(by_branch.values()) == 1, by_branch
    assert generations == dict(per_issue), "one generation per accepted delivery"
    for n in per_issue:
        newest = per_issue[n]
        assert newest in publishers[n], f"issue {n}: run {newest} did not publish"
        assert not [r for r in runs if r.issue == str(n) and r.run_number > newest]
