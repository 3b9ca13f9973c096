"""The article's scenario (issue 23 §1), `frognano solve` end to end: a FastAPI +
SQLAlchemy app on PostgreSQL with Redis (tests/fixtures/shuttle_app, tests/support/
shuttle.py) whose occupancy query counts booking rows instead of summing passengers.
`.github/frognano.yml` asks for `services:`; real PostgreSQL and Redis run inside real
bubblewrap for the agent and every test run; the scripted model's tool calls go through
the real Qwen3-Coder parser. The cheats are tests/reliability/test_verdict_services.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git, make_repo
from tests.reliability.stack import OWNER, StackOptions, running_stack, wait_for
from tests.support.sandbox_support import HAVE_BWRAP
from tests.support.shuttle import FIX, SKIP_REASON, branches, solve

pytestmark = [pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed"),
              pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)]


def test_the_query_fix_is_accepted_by_tests_that_talked_to_postgres(tmp_path: Path) -> None:
    shuttle = make_repo(tmp_path / "shuttle", template="shuttle_app")
    code, output, transcript = solve(shuttle, FIX, tmp_path)
    assert code == 0, output
    assert "tests_passed" in output, output
    assert "tests before: FAIL (exit 1; 1 failed, 2 passed)" in output, output
    assert "tests after:  PASS (exit 0; 3 passed)" in output, output
    assert "verdict: accepted" in output, output
    assert len(branches(shuttle)) == 1
    # The verdict's run printed the server it used: PostgreSQL, in the sandbox's loopback.
    assert "database: PostgreSQL" in transcript and "(shuttle at 127.0.0.1:5432)" in transcript
    # The services as they ran (issue 23 §1): in solve's summary and the model's task.
    assert re.search(r"^services: PostgreSQL \d+\.\d+ \(database shuttle\), Redis \d+\.\d+\.\d+$",
                     output, re.M), output
    task = next(json.loads(line)["task"] for line in transcript.splitlines()
                if json.loads(line).get("kind") == "run")
    assert re.search(r"Services running in the sandbox: PostgreSQL \d+\.\d+ with database "
                     r"`shuttle` \(`DATABASE_URL`, `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, "
                     r"`PGDATABASE`\); Redis \d+\.\d+\.\d+ \(`REDIS_URL`\)\.", task), task
    diff = git(shuttle, "diff", "main", branches(shuttle)[0])
    assert "+    query = select(func.sum(Booking.passengers))" in diff
    assert "tests/" not in diff


def test_a_service_the_worker_lacks_ends_the_run_before_the_agent(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "needs-pg99", template="shuttle_app")
    config = repo / ".github" / "frognano.yml"
    config.write_text(config.read_text().replace("{database: shuttle}",
                                                 "{version: 99, database: shuttle}"))
    git(repo, "commit", "-qam", "PostgreSQL 99")
    code, output, transcript = solve(repo, FIX, tmp_path)
    assert code != 0, output
    assert "services_failed after 0 steps" in output, output
    assert "service `postgresql` version 99 is not available on this worker" in output
    assert "services asked for, not started: PostgreSQL 99 (database shuttle), Redis\n" \
        in output, output
    assert '"tool_calls": {}' in transcript, transcript[-2000:]
    assert branches(repo) == []


def test_the_pr_body_and_the_failure_comment_name_the_services(tmp_path: Path) -> None:
    """Through the bot (issue 23 §1): the receiver, a Celery worker, bubblewrap, the fake
    GitHub. A calculator repository asking for Redis gets a draft PR whose Tests part
    names the Redis that ran; one asking for a PostgreSQL this worker lacks gets a failure
    comment naming what it asked for, and no PR."""
    script = [think_and_call("add uses minus.", "Edit", file_path="calc.py",
                             old_string="return a - b", new_string="return a + b"),
              final_answer("Fixed `add` to return the sum.")]
    with running_stack(tmp_path / "stack", StackOptions(script)) as stack:
        stack.add_calc_repo("calc-redis", {".github/frognano.yml": "services: [redis]\n"})
        stack.add_calc_repo("calc-pg99", {".github/frognano.yml": (
            "services:\n  postgresql: {version: 99, database: ledger}\n")})
        assert stack.label("calc-redis", 1).status_code == 202
        assert stack.label("calc-pg99", 1).status_code == 202
        [pull] = wait_for(lambda: stack.fake.pulls(OWNER, "calc-redis"), timeout=300,
                          message="a draft PR")
        comment = wait_for(lambda: next((c.body for c in stack.fake.comments(
            OWNER, "calc-pg99", 1) if "did not open a pull request" in c.body), None),
            timeout=300, message="the failure comment")
        assert stack.fake.pulls(OWNER, "calc-pg99") == []
    tests = pull.body.split("## Tests")[1].split("\n## ")[0]
    assert re.search(r"^- services: Redis \d+\.\d+\.\d+ \(fresh in every test run's "
                     r"sandbox\)$", tests, re.M), pull.body
    assert "a test service the repository asks for (`services:`) did not start" in comment
    assert "- Services asked for, not started: PostgreSQL 99 (database ledger).\n" in comment, \
        comment
