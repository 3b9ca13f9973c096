"""Scenario 9: load. 1,000 signed deliveries at 200/s into a real uvicorn receiver process
while both run workers are busy, spread over 10 issues in 2 repositories (enough issues
to keep the workers busy, few enough that the test ends).

What must complete: every delivery answered (no 5xx), every accepted delivery given its
generation, and each issue's newest generation opening that issue's one draft PR. Older
generations are superseded (most before they start): finishing 1,000 runs of a 2-second
script would take the suite's whole budget and prove nothing more.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy.exc

from bench.receiver import _free_port, _percentile, _wait_ready
from runstore.store import RunStore
from tests.reliability.conftest import Recorder
from tests.reliability.stack import (
    OWNER,
    SECRET,
    Stack,
    StackOptions,
    running_stack,
    slow_fix_script,
    stop_worker,
    wait_for,
)
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

DELIVERIES = 1000
RATE = 200
REPOS = ("calc-load-a", "calc-load-b")
ISSUES_PER_REPO = 5
RETRY_SHARE = 0.1  # the rest are label deliveries
# A fifth of GitHub's 10-s delivery timeout: here the receiver shares 2 cores with the
# workers, the control worker and the fake GitHub (observed p99 about 0.8 s);
# bench/receiver.py holds the quiet-machine target (50 ms).
P99_LIMIT_MS = 2000.0
SCRIPT = slow_fix_script("sleep 2; ls")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("load"),
                       StackOptions(SCRIPT, run_workers=2, validate_openapi=False)) as stack:
        for repo in REPOS:
            stack.add_calc_repo(repo, issues=ISSUES_PER_REPO)
        yield stack


def start_receiver(stack: Stack) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.receiver", "--serve", "receiver", "--port", str(port)],
        env=stack.env, stdout=(stack.root / "receiver.log").open("wb"),
        stderr=subprocess.STDOUT, start_new_session=True)
    _wait_ready(port, process)
    return process, port


def load_plan(stack: Stack, seed: int = 9) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    issues = [(repo, n) for repo in REPOS for n in range(1, ISSUES_PER_REPO + 1)]
    plan = []
    for _ in range(DELIVERIES):
        repo, number = rng.choice(issues)
        if rng.random() < RETRY_SHARE:
            event, payload = "issue_comment", stack.retry_payload(repo, number, "maintainer")
        else:
            event, payload = "issues", stack.label_payload(repo, number)
        plan.append({"event": event, "id": str(uuid.uuid4()), "payload": payload,
                     "issue": [repo, number]})
    return plan


def running_runs(store: RunStore) -> int:
    try:
        return len(store.list_runs(status="running"))
    except sqlalchemy.exc.OperationalError:  # the workers have not made the table yet
        return 0


def send(stack: Stack, port: int, plan: list[dict[str, Any]]) -> dict[str, Any]:
    plan_file, results_file = stack.root / "load-plan.json", stack.root / "load-results.json"
    plan_file.write_text(json.dumps({"port": port, "secret": SECRET, "rate": RATE,
                                     "deliveries": plan}))
    subprocess.run([sys.executable, "-m", "tests.reliability.load_generator",
                    str(plan_file), str(results_file)], check=True, timeout=120)
    return json.loads(results_file.read_text())


def test_load(stack: Stack, scorecard: Recorder) -> None:
    record = scorecard("9-load", "Load (1,000 signed deliveries at 200/s, workers busy)",
                       "no 5xx and no duplicates; every delivery accepted once; each issue's "
                       "newest run opens its one draft PR; p99 latency ≤ 2 s")
    record.notes.append("spread over 2 repositories × 5 issues, 10 % `/frognano retry`; a "
                        "uvicorn receiver process, 2 run workers and the control worker "
                        "(8 threads); the older runs of an issue are superseded, so "
                        "the runs that must complete are each issue's newest; the fake "
                        "GitHub's OpenAPI checks are off here only (they cost 4/5 of each "
                        "request), every other scenario keeps them")
    for repo in REPOS:  # the workers are busy before the load starts
        for number in range(1, ISSUES_PER_REPO + 1):
            assert stack.label(repo, number).status_code == 202
    store = RunStore(f"sqlite:///{stack.state / 'frognano.db'}", migrate=False)
    wait_for(lambda: running_runs(store) >= 2, timeout=60, message="both run workers busy")
    receiver, port = start_receiver(stack)
    try:
        plan = load_plan(stack)
        results = send(stack, port, plan)
    finally:
        stop_worker(receiver)
    statuses = Counter(results["statuses"])
    accepted = Counter(tuple(d["issue"]) for d in plan)  # every delivery is new: 202 each
    newest = {issue: count + 1 for issue, count in accepted.items()}  # +1: the warm-up label

    def settled() -> bool:
        return all(f"(run {newest[(repo, n)]})" in stack.status(repo, n)
                   and "opened a draft" in stack.status(repo, n) for repo, n in newest)

    started = time.monotonic()
    wait_for(settled, timeout=180, interval=1, message="each issue's newest run's PR")
    wait_for(lambda: not store.list_runs(status="running", limit=1), timeout=60,
             message="no run still running")
    time.sleep(1)
    runs = [r for repo in REPOS for r in store.list_runs(repo=f"{OWNER}/{repo}", limit=5000)]
    store.close()
    with stack.redis.client() as redis:
        generations = {(repo, n): int(redis.get(f"frognano:generation:{OWNER}/{repo}#{n}") or 0)
                       for repo, n in newest}
    open_pulls = Counter((repo, p.head) for repo in REPOS for p in stack.fake.pulls(OWNER, repo)
                         if p.state == "open")
    status_comments = {(repo, n): len(stack.status_comments(repo, n)) for repo, n in newest}
    run_numbers = Counter((r.repo, r.issue, r.run_number) for r in runs)
    duplicates = (sum(count - 1 for count in open_pulls.values())
                  + sum(count - 1 for count in status_comments.values())
                  + sum(count - 1 for count in run_numbers.values())
                  + sum(generations[i] - newest[i] for i in newest if generations[i] > newest[i]))
    latencies_ms = [s * 1000 for s in results["latencies"]]
    record.observed = {
        "deliveries sent": len(results["statuses"]), "accepted (202)": statuses[202],
        "5xx": sum(n for s, n in statuses.items() if s >= 500),
        "rate achieved /s": len(latencies_ms) / results["wall"],
        "p50 ms": _percentile(latencies_ms, 0.5), "p99 ms": _percentile(latencies_ms, 0.99),
        "max ms": max(latencies_ms), "runs started": len(runs),
        "runs superseded mid-run": sum(r.outcome == "superseded" for r in runs),
        "PRs opened": len(open_pulls), "duplicates": duplicates,
        "seconds to settle after the load": time.monotonic() - started}
    assert len(results["statuses"]) == DELIVERIES
    assert statuses[202] == DELIVERIES, statuses
    assert duplicates == 0, (open_pulls, status_comments, run_numbers, generations)
    assert generations == newest, "every accepted delivery got exactly one generation"
    assert len(open_pulls) == len(newest), "one PR per issue"
    assert _percentile(latencies_ms, 0.99) <= P99_LIMIT_MS
