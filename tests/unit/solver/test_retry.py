"""The one back-off loop (solver/retry.py), timed for real with short waits."""

from __future__ import annotations

import itertools
import time

import pytest

from solver.retry import Backoff, Transient, with_backoff


class Flaky:
    """Fails its first `failures` calls with `error`, then answers its call number;
    remembers when each call came."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error = failures, error
        self.calls: list[tuple[int, float]] = []

    def __call__(self, number: int) -> int:
        self.calls.append((number, time.monotonic()))
        if len(self.calls) <= self.failures:
            raise self.error
        return number


def gaps(flaky: Flaky) -> list[float]:
    times = [at for _, at in flaky.calls]
    return [later - earlier for earlier, later in itertools.pairwise(times)]


def test_retries_until_a_try_answers_waiting_twice_as_long_each_time() -> None:
    flaky = Flaky(3, Transient("server error (502)"))
    answer = with_backoff(flaky, Backoff(tries=5, first_wait=0.03), what="GET thing")
    assert answer == 4 and [n for n, _ in flaky.calls] == [1, 2, 3, 4]
    first, second, third = gaps(flaky)
    # Sleeps never end early; a loaded machine may end them late (the upper margin).
    assert 0.03 <= first < 0.03 + 0.1, first
    assert 0.06 <= second < 0.06 + 0.1, second
    assert 0.12 <= third < 0.12 + 0.1, third


def test_gives_up_after_the_policys_tries_raising_the_last_failure() -> None:
    last = Transient("connection error (ConnectError)")
    flaky = Flaky(10, last)
    with pytest.raises(Transient) as info:
        with_backoff(flaky, Backoff(tries=3, first_wait=0.01), what="POST comment")
    assert info.value is last and len(flaky.calls) == 3


def test_what_the_policy_does_not_name_is_raised_at_once() -> None:
    flaky = Flaky(1, ValueError("a 404 is an answer"))
    with pytest.raises(ValueError):
        with_backoff(flaky, Backoff(tries=5, first_wait=0.01), what="GET file")
    assert len(flaky.calls) == 1


def test_a_caller_names_its_own_retryable_errors() -> None:
    flaky = Flaky(1, OSError("push refused"))
    policy = Backoff(tries=2, first_wait=0.01, retry_on=(OSError,))
    assert with_backoff(flaky, policy, what="push") == 2


def test_a_servers_own_wait_is_followed_up_to_the_cap() -> None:
    flaky = Flaky(2, Transient("rate limited (429)", wait=30.0, status=429))
    started = time.monotonic()
    with_backoff(flaky, Backoff(tries=3, first_wait=5.0, max_wait=0.05), what="GET")
    assert all(0.05 <= gap < 0.05 + 0.2 for gap in gaps(flaky)), gaps(flaky)
    assert time.monotonic() - started < 1.0


def test_the_wait_doubles_from_the_first_and_stops_at_the_cap() -> None:
    policy = Backoff(tries=6, first_wait=1.0, max_wait=6.0)
    assert [policy.wait_after(k) for k in range(1, 6)] == [1.0, 2.0, 4.0, 6.0, 6.0]
    assert policy.wait_after(1, hint=0.25) == 0.25 and policy.wait_after(2, hint=-1) == 0.0


def test_zero_tries_still_makes_one_try() -> None:
    flaky = Flaky(0, Transient("never"))
    assert with_backoff(flaky, Backoff(tries=0, first_wait=1.0), what="GET") == 1
