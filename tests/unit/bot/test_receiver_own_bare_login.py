"""The bot's own events under the bare login are ignored by the receiver (issue 30 §6).

FROGNANO_BOT_LOGIN may name the App without `[bot]` (`frognano`). A delivery whose sender
is a Bot account of that bare login is the bot itself: its failure comment quotes
`/frognano retry`, and its own label would start a run on the issue it just answered, a
loop. A person who owns the bare login (a User) still starts runs. The real receiver, a
real redis-server and the real Celery client; the queue is read back from Redis.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from bot.app import create_app, redis_client_for
from bot.enqueue import CeleryEnqueuer
from tests.support.redis_server import RedisServer
from tests.unit.bot.test_receiver import QUEUE, deliver, queued, settings
from tests.unit.bot.test_webhook_events import commented, labeled

BARE = "frognano"
BOT_SENDER = {"login": BARE, "type": "Bot"}


@pytest.fixture
def receiver(redis_server: RedisServer) -> Iterator[TestClient]:
    enqueuer = CeleryEnqueuer(redis_server.url, QUEUE)
    redis_client = redis_client_for(redis_server.url)
    app = create_app(settings(), enqueuer=enqueuer, redis_client=redis_client, bot_login=BARE)
    with TestClient(app) as client:
        yield client
    redis_client.close()
    enqueuer.close()


def test_the_bots_own_comment_and_label_under_the_bare_login_start_nothing(
        receiver: TestClient, redis_server: RedisServer) -> None:
    comment = commented("The run failed.\n/frognano retry\n", sender=BOT_SENDER)
    assert deliver(receiver, "issue_comment", comment).status_code == 204
    assert deliver(receiver, "issues", labeled(sender=BOT_SENDER)).status_code == 204
    assert queued(redis_server) == []


def test_a_person_who_owns_the_bare_login_still_starts_a_run(
        receiver: TestClient, redis_server: RedisServer) -> None:
    """The same delivery from a User: the ignore above is for the Bot account only."""
    person = {"login": BARE, "type": "User"}
    assert deliver(receiver, "issue_comment", commented("/frognano retry",
                                                        sender=person)).status_code == 202
    assert [kwargs["actor"] for _, kwargs in queued(redis_server)] == [BARE]
