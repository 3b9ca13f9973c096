"""The article's scenario (issue 23 §1), `frognano solve` end to end: a FastAPI +
SQLAlchemy app on PostgreSQL with Redis (tests/fixtures/shuttle_app, tests/support/
shuttle.py) whose occupancy query counts booking rows instead of summing passengers.
`.github/frognano.yml` asks for `services:`; real PostgreSQL and Redis run inside real
bubblewrap for the agent and every test run; the scripted model's tool calls go through
the real Qwen3-Coder parser. The cheats are tests/reliability/test_verdict_services.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import git, make_repo
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
    assert '"tool_calls": {}' in transcript, transcript[-2000:]
    assert branches(repo) == []
