"""A forged session cookie reads nothing (issue 30 §6).

The dashboard's cookie holds an HMAC of its token, compared in constant time; having a
cookie of that name is not enough. The attacker here knows the cookie's name (it is in
the source) and sends it with values of their choosing to the real receiver's dashboard
routes: a random value, the token's own spelling guessed wrong, another deployment's
session value, and the transcript of a run must stay unread.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from bot.deps import COOKIE
from runstore.store import RunStore
from tests.support.redis_server import RedisServer
from tests.unit.bot.test_dashboard import TOKEN, make_app, record_finished_run

OTHER_DEPLOYMENT = hmac.new(b"another-deployments-token", b"frognano-dashboard-session",
                            hashlib.sha256).hexdigest()
FORGED = ["1", "x" * 64, TOKEN + "x", OTHER_DEPLOYMENT, "%00", "null"]


@pytest.fixture
def dashboard(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[TestClient, int]]:
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    run_id = record_finished_run(store, tmp_path)
    with TestClient(make_app(store, redis_server, tmp_path, FROGNANO_DASHBOARD_TOKEN=TOKEN),
                    follow_redirects=False) as client:
        yield client, run_id
    store.close()


@pytest.mark.parametrize("forged", FORGED)
def test_a_forged_session_cookie_reads_no_run(dashboard: tuple[TestClient, int],
                                              forged: str) -> None:
    client, run_id = dashboard
    client.cookies.set(COOKIE, forged)
    for path in ("/runs", f"/runs/{run_id}", "/runs/octo/calc/1/1"):
        answer = client.get(path)
        assert answer.status_code == 401, (path, answer.status_code)
        assert "SECRET-REASONING" not in answer.text
    live = client.get(f"/runs/{run_id}/live")
    assert live.status_code == 401 and "SECRET-REASONING" not in live.text


def test_the_session_the_token_buys_reads_the_run(dashboard: tuple[TestClient, int]) -> None:
    """The same routes with the cookie a login sets: the forged ones were refused for
    their value, not because the page was out of reach."""
    client, run_id = dashboard
    assert client.get(f"/runs?token={TOKEN}").status_code == 303
    assert "SECRET-REASONING" in client.get(f"/runs/{run_id}").text
