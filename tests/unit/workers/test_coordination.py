"""Per-issue generations, the run lock and its heartbeat, on a real redis-server."""

from __future__ import annotations

import threading
import time

from tests.support.redis_server import RedisServer
from workers import coordination
from workers.coordination import IssueCoordinator


def test_generation_is_assigned_once_per_delivery(redis_server: RedisServer) -> None:
    issue = IssueCoordinator(redis_server.client(), "o/r#1")
    assert issue.assign_generation("d1") == 1
    assert issue.assign_generation("d1") == 1, "a redelivered accept reuses its generation"
    assert issue.assign_generation("d2") == 2
    assert issue.is_stale(1) and not issue.is_stale(2)
    other = IssueCoordinator(redis_server.client(), "o/r#2")
    assert other.assign_generation("d3") == 1, "generations are per issue"


def test_concurrent_deliveries_get_distinct_generations(redis_server: RedisServer) -> None:
    issue = IssueCoordinator(redis_server.client(), "o/r#1")
    results: list[int] = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        issue.assign_generation(f"d{i % 5}"))) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(set(results)) == [1, 2, 3, 4, 5]


def test_lock_is_exclusive_and_released_only_by_its_owner(redis_server: RedisServer) -> None:
    issue = IssueCoordinator(redis_server.client(), "o/r#1")
    assert issue.try_lock(1)
    assert not issue.try_lock(2)
    assert issue.wait_for_lock(1, timeout=0.2) == "duplicate"
    assert issue.wait_for_lock(2, timeout=0.3, poll=0.05) == "timeout"
    issue.release_lock(2)
    assert issue.lock_holder() == 1, "a run never frees another run's lock"
    issue.release_lock(1)
    assert issue.wait_for_lock(2, timeout=0.2) == "acquired"


def test_a_waiting_run_learns_it_was_superseded(redis_server: RedisServer) -> None:
    issue = IssueCoordinator(redis_server.client(), "o/r#1")
    for delivery in ("a", "b", "c"):
        issue.assign_generation(delivery)
    assert issue.try_lock(1)
    assert issue.wait_for_lock(2, timeout=2, poll=0.05) == "stale"


def test_older_run_hands_over_when_it_stops(redis_server: RedisServer) -> None:
    issue = IssueCoordinator(redis_server.client(), "o/r#1")
    issue.assign_generation("a")
    assert issue.try_lock(1)
    issue.assign_generation("b")
    # The older run sees it is stale at its next step, stops, and releases the lock.
    assert issue.is_stale(1)
    threading.Timer(0.2, issue.release_lock, args=(1,)).start()
    started = time.monotonic()
    assert issue.wait_for_lock(2, timeout=5, poll=0.05) == "acquired"
    assert time.monotonic() - started < 2


def test_heartbeat_keeps_the_lock_and_a_dead_runs_lock_expires(
        redis_server: RedisServer, monkeypatch) -> None:
    monkeypatch.setattr(coordination, "LOCK_TTL", 1)
    monkeypatch.setattr(coordination, "HEARTBEAT_SECONDS", 0.2)
    issue = IssueCoordinator(redis_server.client(), "o/r#1")
    assert issue.try_lock(1)
    with issue.heartbeat(1):
        time.sleep(1.5)
        assert issue.lock_holder() == 1, "the heartbeat refreshed the TTL"
    time.sleep(1.3)
    assert issue.lock_holder() is None, "without heartbeats the lock expires"
    assert issue.try_lock(2)


def test_done_generations_are_remembered(redis_server: RedisServer) -> None:
    issue = IssueCoordinator(redis_server.client(), "o/r#1")
    assert not issue.is_done(3)
    issue.mark_done(3)
    assert issue.is_done(3) and not issue.is_done(4)


def test_a_run_superseded_before_it_began_does_not_start(
        redis_server: RedisServer) -> None:
    issue = IssueCoordinator(redis_server.client(), "o/r#1")
    issue.assign_generation("a")
    issue.assign_generation("b")
    assert issue.wait_for_lock(1, timeout=1) == "stale"
    assert issue.lock_holder() is None, "the stale run gave the lock back"
    assert issue.wait_for_lock(2, timeout=1) == "acquired"


def test_a_cancel_is_a_generation_that_names_who_stopped_the_run(
        redis_server: RedisServer) -> None:
    issue = IssueCoordinator(redis_server.client(), "o/r#5")
    assert not issue.is_active(), "nothing assigned yet"
    running = issue.assign_generation("label")
    assert issue.is_active()
    cancel = issue.assign_generation("cancel")
    issue.record_cancel(cancel, "cancelled by @alice")
    issue.mark_done(cancel)
    assert issue.is_stale(running) and not issue.is_active()
    assert issue.stop_reason() == ("cancelled", "cancelled by @alice")
    assert issue.wait_for_lock(running, timeout=0.2) == "stale", "a queued run never starts"
    # A newer trigger after the cancel supersedes; it is not a cancel.
    issue.assign_generation("retry")
    assert issue.stop_reason() == ("superseded", None)
