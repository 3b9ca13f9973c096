"""The `reliability` marker, and the `scorecard` fixture every scenario records through."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.reliability.scorecard import ScenarioRecord


def pytest_configure(config: pytest.Config) -> None:
    # Also registered in pyproject.toml; repeated here so the suite stands alone.
    config.addinivalue_line("markers", "reliability: fault-injection, hostile-input and "
                                       "load scenarios (python3 -m tests.reliability)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.when == "call" or report.failed:
        item.stash.setdefault(_OUTCOME, []).append(report.outcome if report.when == "call"
                                                   else "error")
    return report


_OUTCOME = pytest.StashKey[list[str]]()
Recorder = Callable[[str, str, str], ScenarioRecord]


@pytest.fixture
def scorecard(request: pytest.FixtureRequest) -> Iterator[Recorder]:
    """`scorecard(key, title, expectation)` returns a record the test fills in; it is
    written when the test ends, with the test's outcome."""
    records: list[ScenarioRecord] = []
    started = time.monotonic()

    def open_record(key: str, title: str, expectation: str) -> ScenarioRecord:
        record = ScenarioRecord(key, title, expectation)
        records.append(record)
        return record

    yield open_record
    outcomes = request.node.stash.get(_OUTCOME, [])
    outcome = "failed" if "failed" in outcomes else "error" if "error" in outcomes \
        else outcomes[-1] if outcomes else "error"
    for record in records:
        record.outcome = outcome
        record.seconds = round(time.monotonic() - started, 1)
        record.ran_at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        record.write()
