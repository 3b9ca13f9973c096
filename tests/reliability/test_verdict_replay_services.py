"""Verdict integrity (issue 31): a review's change replayed on a moved head is judged in
the run's own sandbox recipe, its test services included.

A calculator repository asks for `services: [redis]` and has a test that talks to that
Redis. The bot opens its draft PR; a maintainer's review asks for a change; while the
bot pushes it, a person pushes a commit of their own to the PR branch, so the change is
replayed on the moved head and the tests re-run on the merged tree. That re-run must
start the repository's Redis as every run of the review did: judged without it, the
repository's own test fails on a tree it passes on, and the review's change is refused
(or, with a weaker rule, judged on a different sandbox than the run's). End to end: real
receiver, redis-server, Celery worker, bubblewrap, git into the fake GitHub.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_pipeline import SCRIPT, human_push
from tests.e2e.test_review_races import (
    BRANCH,
    EXTRA_TEST,
    bot_pr,
    replay_records,
    review,
    review_run,
    when_the_bot_pushes,
)
from tests.reliability.conftest import Recorder
from tests.reliability.stack import OWNER, Stack, StackOptions, running_stack
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed"),
              pytest.mark.skipif(not os.path.exists("/usr/bin/redis-server"),
                                 reason="redis-server is not installed")]

REPO = "calc-redis-replay"
# The repository's own test of its cache: the Redis the config asks for answers PING.
REDIS_TEST = """import os
import socket
from urllib.parse import urlparse


def test_the_cache_answers():
    url = urlparse(os.environ["REDIS_URL"])
    with socket.create_connection((url.hostname, url.port), timeout=10) as conn:
        conn.sendall(b"PING\\r\\n")
        assert conn.recv(64).startswith(b"+PONG")
"""
CACHE_TEST = "tests/test_cache.py::test_the_cache_answers"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack"), StackOptions(SCRIPT)) as stack:
        stack.add_calc_repo(REPO, {".github/frognano.yml": "services: [redis]\n",
                                   "tests/test_cache.py": REDIS_TEST})
        yield stack


def test_a_replay_on_a_moved_head_runs_with_the_repositorys_services(
        stack: Stack, tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard("12-verdict-services-replay",
                       "Test services (Redis): a review's change is replayed on a head a "
                       "person pushed during the run",
                       "the re-run on the merged tree starts the repository's Redis, as "
                       "the run's did: the cache test passes and the change is pushed")
    pull = bot_pr(stack, REPO)
    bare = stack.fake.repo(OWNER, REPO).bare_path
    human: list[str] = []
    when_the_bot_pushes(stack, REPO, lambda: human.append(human_push(
        bare, tmp_path / "human", "tests/test_more.py", EXTRA_TEST)))
    review(stack, REPO, pull)
    run = review_run(stack, REPO)
    replay = replay_records(stack, REPO, run)
    record.observed = {"review run": run.outcome, "replayed on the person's head":
                       bool(human) and replay["head"] == human[0],
                       "cache test in the re-run": replay["tests"].get(CACHE_TEST),
                       "cache test on the new head's baseline":
                       replay["baseline"]["tests"].get(CACHE_TEST)}
    assert human and replay["head"] == human[0], "the person's push moved the branch"
    assert replay["baseline"]["tests"].get(CACHE_TEST) == "passed", replay["baseline"]
    assert replay["tests"].get(CACHE_TEST) == "passed", replay
    assert replay["verdict"]["accepted"] is True, replay["verdict"]
    assert run.outcome == "pushed"
    assert stack.fake.branch_sha(OWNER, REPO, BRANCH) != human[0], "the change is on top"
