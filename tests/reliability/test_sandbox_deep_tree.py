"""Hostile issue, red team (issue 9 §4): trees the host walks after the sandbox wrote them.

The model nests directories past PATH_MAX (one `cd` at a time) and hides data at the
bottom, or makes tens of thousands of empty files: the disk quota must still see them.
And the host's cleanup of the run directory must remove such a tree (shutil.rmtree
recursed once per level and raised RecursionError, leaving the run on the host's disk).
"""

from __future__ import annotations

import os

import pytest

from sandbox import SandboxLimits
from sandbox.trees import remove_tree
from tests.reliability.conftest import Recorder
from tests.support.sandbox_attack import WORKERS, run_steps, worker_home
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed"),
              pytest.mark.skipif(os.geteuid() != 0, reason="runs workers as root and not")]

LEVELS = 1500  # names of 200 bytes: a host path of ~300 kB, far past PATH_MAX (4 kB)
NEST = ("python3 - <<'PY'\nimport os\nos.chdir('/workspace')\n"
        f"for _ in range({LEVELS}):\n    os.mkdir('d' * 200)\n    os.chdir('d' * 200)\n"
        "with open('hidden.bin', 'wb') as f:\n    f.write(os.urandom({size}))\n"
        "print('nested')\nPY")
EMPTY_FILES = ("python3 -c \"import os; os.mkdir('/workspace/many'); "
               "[open(f'/workspace/many/{i}', 'w').close() for i in range(30000)]; "
               "print('made')\"")


@pytest.mark.parametrize("worker", WORKERS)
def test_a_deep_tree_is_measured_and_removed(worker: str, scorecard: Recorder) -> None:
    record = scorecard(f"6n-sandbox-deep-tree-{worker}",
                       f"Hostile issue: hide data past PATH_MAX ({worker} worker)",
                       "20 MB at the bottom of 1,500 nested directories, with a 16 MiB "
                       "disk quota: the quota kills the command; the host removes the "
                       "whole tree afterwards")
    limits = SandboxLimits(disk_bytes=16 * 1024**2)
    with worker_home(worker) as (root, uid):
        outcome = run_steps(worker, root, uid, [("Bash", NEST.format(size=20_000_000))],
                            limits=limits)
        remove_tree(root / "ws")
        left = (root / "ws").exists()
    answer = outcome.answers[0]
    record.observed = {"answer": answer[:160], "tree left on the host": left}
    assert "disk_quota" in answer, answer
    assert not left


@pytest.mark.parametrize("worker", WORKERS)
def test_empty_files_count_against_the_quota(worker: str, scorecard: Recorder) -> None:
    record = scorecard(f"6o-sandbox-inodes-{worker}",
                       f"Hostile issue: exhaust the host's inodes ({worker} worker)",
                       "30,000 empty files (0 bytes each) against a 64 MiB quota: each "
                       "costs a block, so the quota ends the command")
    limits = SandboxLimits(disk_bytes=64 * 1024**2)
    with worker_home(worker) as (root, uid):
        outcome = run_steps(worker, root, uid, [("Bash", EMPTY_FILES)], limits=limits)
    record.observed = {"answer": outcome.answers[0][:160]}
    assert "disk_quota" in outcome.answers[0], outcome.answers[0]
