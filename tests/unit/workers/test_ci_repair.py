"""CI repair rounds per PR, counted in a real redis-server: numbered from the last run a
person started, each round once however often its run is delivered, all of them listed."""

from __future__ import annotations

from bot.messages import CiRoundLine
from tests.support.redis_server import RedisServer
from workers.ci_repair import ROUNDS_TTL, CiRounds


def test_rounds_are_counted_once_each_and_listed_with_their_checks(
        redis_server: RedisServer) -> None:
    client = redis_server.client()
    rounds = CiRounds(client, "o/r#1")
    assert rounds.count() == 0 and rounds.lines() == []
    assert rounds.start(3, "a" * 40, ["tests (3.11)"]) == 1
    assert rounds.start(3, "a" * 40, ["tests (3.11)"]) == 1, "a redelivered run: one round"
    assert rounds.start(5, "b" * 40, ["tests (3.11)", "lint"]) == 2
    assert rounds.count() == 2
    rounds.finish(3, "pushed")
    assert rounds.lines() == [CiRoundLine(1, "a" * 40, ("tests (3.11)",), "pushed"),
                              CiRoundLine(2, "b" * 40, ("tests (3.11)", "lint"), "running")]
    assert rounds.current(5) == CiRoundLine(2, "b" * 40, ("tests (3.11)", "lint"))
    assert 0 < client.ttl("frognano:ci-rounds:o/r#1") <= ROUNDS_TTL
    assert CiRounds(client, "o/r#2").count() == 0, "rounds are per issue"


def test_a_run_a_person_started_restarts_the_count_and_keeps_the_list(
        redis_server: RedisServer) -> None:
    rounds = CiRounds(redis_server.client(), "o/r#1")
    rounds.reset()
    assert rounds.lines() == [], "nothing to restart: no marker"
    rounds.start(2, "a" * 40, ["tests"])
    rounds.start(3, "b" * 40, ["tests"])
    rounds.reset()
    assert rounds.count() == 0
    assert rounds.start(5, "c" * 40, ["tests"]) == 1
    assert [(line.number, line.head[0]) for line in rounds.lines()] == [
        (1, "a"), (2, "b"), (1, "c")]
    assert rounds.current(3) == CiRoundLine(2, "b" * 40, ("tests",))
