"""Scenario 2: Redis is restarted in the middle of a run. While it is down the receiver
answers 503 (GitHub redelivers later); afterwards nothing is lost and nothing is done
twice: the run in flight finishes, the refused delivery is redelivered and runs, and
each issue has exactly one status comment and one draft PR.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from tests.reliability.conftest import Recorder
from tests.reliability.stack import (
    OWNER,
    Stack,
    StackOptions,
    running_stack,
    slow_fix_script,
    wait_for,
)
from tests.support.sandbox_support import HAVE_BWRAP, host_pids_with

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

LONG_STEP = "sleep 6.17"  # a unique command line: the run is mid-step while Redis is down
OUTAGE_S = 3.0
VISIBILITY_S = 8  # longer than the lock TTL (4 s), as in production
REPO = "calc-redis"
SCRIPT = slow_fix_script(LONG_STEP, "Run the slow diagnostics first.")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Short broker visibility timeout: a message the restart left unacknowledged comes
    # back within the test, so a duplicate run would show.
    options = StackOptions(SCRIPT, run_workers=1,
                           worker_module="tests.reliability.fast_recovery_worker",
                           env={"FROGNANO_MAX_RUN_SECONDS": "300",
                                "RELIABILITY_VISIBILITY_TIMEOUT": str(VISIBILITY_S),
                                "RELIABILITY_LOCK_TTL": "4"})
    with running_stack(tmp_path_factory.mktemp("redis-restart"), options) as stack:
        stack.add_calc_repo(REPO, issues=2)
        yield stack


def test_redis_restart_mid_run(stack: Stack, scorecard: Recorder) -> None:
    record = scorecard("2-redis-restart", "Redis restarted mid-run",
                       "the receiver answers 503 while Redis is down; afterwards the run in "
                       "flight finishes and the refused delivery, redelivered, runs: one "
                       "status comment and one draft PR per issue")
    assert stack.label(REPO, 1).status_code == 202
    wait_for(lambda: host_pids_with(LONG_STEP), timeout=60, message="the run mid-step")

    stack.redis.stop()
    down_at = time.monotonic()
    refused = str(uuid.uuid4())
    outage_answers: list[int] = []
    while not outage_answers or time.monotonic() - down_at < OUTAGE_S:
        outage_answers.append(stack.label(REPO, 2, delivery=refused).status_code)
        time.sleep(0.5)
    stack.redis.start()
    outage = time.monotonic() - down_at

    # GitHub's redelivery of what was refused; the receiver may need a moment to reconnect.
    redelivered = wait_for(lambda: (code := stack.label(REPO, 2, delivery=refused)
                                    .status_code) in (200, 202) and code,
                           timeout=30, interval=1, message="the redelivery accepted")
    for number in (1, 2):
        wait_for(lambda n=number: "opened a draft" in stack.status(REPO, n)
                 or "could not finish" in stack.status(REPO, n),
                 timeout=120, message=f"issue {number}'s final status")
    time.sleep(VISIBILITY_S + 1)  # a redelivered duplicate would have run by now
    pulls = stack.fake.pulls(OWNER, REPO)
    statuses = {n: stack.status_comments(REPO, n) for n in (1, 2)}
    record.observed = {
        "outage seconds": outage,
        "deliveries during the outage": len(outage_answers),
        "answered 503": outage_answers.count(503),
        "redelivery answered": redelivered, "PRs": len(pulls),
        "status comments": [len(s) for s in statuses.values()],
        "transcripts": len(stack.transcripts(REPO)),
        "final status of the run in flight": statuses[1][0].split("**FrogNano** ", 1)[-1][:40]}
    assert outage_answers.count(503) == len(outage_answers), outage_answers
    assert "opened a draft" in statuses[1][0], "the run in flight finished"
    assert "opened a draft" in statuses[2][0], "the refused delivery was not lost"
    assert [len(s) for s in statuses.values()] == [1, 1]
    assert sorted(p.head for p in pulls) == ["frognano/issue-1", "frognano/issue-2"]
    assert len(stack.transcripts(REPO)) == 2, "one run per issue"
