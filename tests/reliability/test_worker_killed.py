"""Scenario 1: a run worker is killed with `kill -9` in the middle of a run. The task is
redelivered to the other run worker, which finishes it: exactly one draft PR."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

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

LONG_STEP = "sleep 7.31"  # a unique command line to find the run on the host
SCRIPT = slow_fix_script(LONG_STEP, "Run the slow diagnostics first.")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    options = StackOptions(SCRIPT, run_workers=2,
                           worker_module="tests.reliability.fast_recovery_worker",
                           env={"FROGNANO_MAX_RUN_SECONDS": "300"})
    with running_stack(tmp_path_factory.mktemp("killed"), options) as stack:
        stack.add_calc_repo("calc")
        yield stack


def parent_pid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def owning_worker(stack: Stack, pid: int) -> int | None:
    """The run worker (its main process) that `pid` descends from."""
    mains = {worker.pid: index for index, worker in enumerate(stack.run_workers)}
    while pid > 1:
        if pid in mains:
            return mains[pid]
        pid = parent_pid(pid)
    return None


def test_killed_worker_run_is_finished_by_another(stack: Stack, scorecard: Recorder) -> None:
    record = scorecard("1-worker-killed", "Worker killed (`kill -9` mid-run)",
                       "the run is redelivered and finished by the other worker: exactly "
                       "one draft PR, one status comment, the transcript shows the restart")
    assert stack.label("calc", 1).status_code == 202
    # (index,) so that worker 0 counts as found
    (victim,) = wait_for(lambda: next(((w,) for pid in host_pids_with(LONG_STEP)
                                       if (w := owning_worker(stack, pid)) is not None), None),
                         timeout=60, message="the run, on one of the workers")
    killed_at = time.monotonic()
    os.killpg(stack.run_workers[victim].pid, signal.SIGKILL)
    stack.run_workers[victim].wait()
    time.sleep(1)
    orphans = host_pids_with(LONG_STEP)

    pulls = wait_for(lambda: stack.fake.pulls(OWNER, "calc"), timeout=120,
                     message="the PR from the surviving worker")
    recovered = time.monotonic() - killed_at
    wait_for(lambda: "opened a draft" in stack.status("calc", 1), timeout=30,
             message="the final status")
    time.sleep(2)  # anything duplicated would show up now
    transcript = stack.transcripts("calc")
    runs = [json.loads(line) for path in transcript
            for line in path.read_text().splitlines() if '"kind": "run"' in line]
    record.observed = {"run workers": 2, "killed": 1, "sandbox orphans": len(orphans),
                       "seconds from kill to PR": recovered, "PRs": len(stack.fake.pulls(
                           OWNER, "calc")), "status comments": len(stack.status_comments(
                               "calc", 1)), "runs in the transcript": len(runs)}
    record.notes.append("timings shrunk by tests/reliability/fast_recovery_worker.py: "
                        "visibility timeout 12 s, lock TTL 6 s (production: "
                        "max_run_seconds + 1800 s and 120 s)")
    assert orphans == [], "the sandbox died with its worker"
    assert len(pulls) == 1 and len(stack.fake.pulls(OWNER, "calc")) == 1
    assert len(stack.status_comments("calc", 1)) == 1
    assert len(runs) == 2, "the transcript shows the killed run and the restart"
    survivor = stack.run_workers[1 - victim]
    assert survivor.poll() is None
