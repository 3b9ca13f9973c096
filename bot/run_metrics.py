"""Run metrics for /metrics, computed from the run store at scrape time.

Worker processes serve no metrics of their own (that would be one more port per GPU
process): they write run records, and the receiver aggregates them when Prometheus scrapes.
Counters are sums over all recorded runs, so they only grow as runs finish (deleting
records would reset them, which Prometheus handles as a counter reset).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select

from runstore.store import FINISHED_STATUSES, Run, RunStore, ToolStat

log = logging.getLogger(__name__)

DURATION_BUCKETS = (30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
STEP_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200)
TOKENS_PER_SECOND_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500)
# Tool names come from model output; anything else is "other" to bound label cardinality.
KNOWN_TOOLS = frozenset({"Read", "Write", "Edit", "Glob", "Bash"})

QueueDepth = Callable[[], dict[str, int]]


class RunMetricsCollector(Collector):
    def __init__(self, store: RunStore, queue_depth: QueueDepth | None = None) -> None:
        self._store = store
        self._queue_depth = queue_depth

    def describe(self) -> list[Metric]:
        return []  # collected at scrape time only; no queries when registered

    def collect(self) -> Iterator[Metric]:
        yield from self._queues()
        up = GaugeMetricFamily("frognano_run_store_up",
                               "1 when the run store answered this scrape.")
        try:
            metrics = list(self._runs())
        except Exception:
            log.warning("run metrics: the run store did not answer", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from metrics

    def _queues(self) -> Iterator[Metric]:
        if self._queue_depth is None:
            return
        depth = GaugeMetricFamily("frognano_queue_depth", "Tasks waiting in a Redis queue.",
                                  labels=["queue"])
        try:
            lengths = self._queue_depth()
        except Exception as exc:
            log.warning("run metrics: no queue depth (%s)", exc)
            return
        for queue, length in sorted(lengths.items()):
            depth.add_metric([queue], length)
        yield depth

    def _runs(self) -> Iterator[Metric]:
        with self._store.session() as session:
            rows = _query_runs(session)
        yield _by_status(rows.by_status)
        yield _by_outcome(rows.by_outcome)
        yield from rows.histograms
        sent, evaluated, completion, sandbox = rows.totals
        for name, doc, value in (
            ("frognano_prompt_tokens_sent", "Prompt tokens sent to the model.", sent),
            ("frognano_prompt_tokens_evaluated",
             "Prompt tokens the backend evaluated (the rest came from its cache).", evaluated),
            ("frognano_completion_tokens", "Tokens generated.", completion),
            ("frognano_sandbox_seconds", "Time inside the sandbox: tools, setup, tests.",
             sandbox),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        yield from _tool_metrics(rows.tools)


@dataclass(frozen=True)
class _RunRows:
    """What one scrape read from the run store, in one session."""

    by_status: list[Any]  # (status, count)
    by_outcome: list[Any]  # (status, exit reason, count) of finished runs
    totals: Any  # (prompt tokens sent, evaluated, completion tokens, sandbox seconds)
    tools: list[Any]  # (tool, outcome, calls, seconds)
    histograms: list[HistogramMetricFamily]


def _query_runs(session: Any) -> _RunRows:
    finished = Run.status.in_(FINISHED_STATUSES)
    by_status = session.execute(select(Run.status, func.count()).group_by(Run.status))
    by_outcome = session.execute(
        select(Run.status, Run.exit_reason, func.count()).where(finished)
        .group_by(Run.status, Run.exit_reason))
    totals = session.execute(select(
        func.coalesce(func.sum(Run.prompt_tokens), 0),
        func.coalesce(func.sum(Run.prompt_tokens_evaluated), 0),
        func.coalesce(func.sum(Run.completion_tokens), 0),
        func.coalesce(func.sum(Run.sandbox_seconds), 0.0),
    ).where(finished)).one()
    tools = session.execute(
        select(ToolStat.tool, ToolStat.outcome, func.sum(ToolStat.calls),
               func.sum(ToolStat.seconds))
        .group_by(ToolStat.tool, ToolStat.outcome))
    histograms = [
        _histogram(session, "frognano_run_duration_seconds", "Wall time of finished runs.",
                   Run.seconds, DURATION_BUCKETS, finished & Run.seconds.is_not(None)),
        _histogram(session, "frognano_run_steps", "Model turns per finished run.",
                   Run.steps, STEP_BUCKETS, finished),
        _histogram(session, "frognano_run_tokens_per_second",
                   "Generated tokens per second of generation, per finished run.",
                   Run.completion_tokens / Run.completion_seconds,
                   TOKENS_PER_SECOND_BUCKETS, finished & (Run.completion_seconds > 0)),
    ]
    return _RunRows(list(by_status), list(by_outcome), totals, list(tools), histograms)


def _by_status(rows: list[Any]) -> GaugeMetricFamily:
    runs = GaugeMetricFamily("frognano_runs", "Recorded runs by current status.",
                             labels=["status"])
    for status, count in rows:
        runs.add_metric([status], count)
    return runs


def _by_outcome(rows: list[Any]) -> CounterMetricFamily:
    outcomes = CounterMetricFamily("frognano_run_outcomes", "Finished runs by outcome.",
                                   labels=["status", "exit_reason"])
    for status, exit_reason, count in rows:
        outcomes.add_metric([status, exit_reason or "none"], count)
    return outcomes


def _tool_metrics(rows: list[Any]) -> Iterator[Metric]:
    """Calls and seconds by tool and outcome; a tool name the model made up is "other"."""
    calls = CounterMetricFamily("frognano_tool_calls", "Tool calls by tool and outcome.",
                                labels=["tool", "outcome"])
    seconds = CounterMetricFamily("frognano_tool_seconds", "Time in tool calls by tool.",
                                  labels=["tool", "outcome"])
    merged: dict[tuple[str, str], tuple[int, float]] = {}
    for tool, outcome, count, spent in rows:
        key = (tool if tool in KNOWN_TOOLS else "other", outcome)
        old_count, old_spent = merged.get(key, (0, 0.0))
        merged[key] = (old_count + int(count or 0), old_spent + float(spent or 0))
    for key, (count, spent) in sorted(merged.items()):
        calls.add_metric(list(key), count)
        seconds.add_metric(list(key), spent)
    yield calls
    yield seconds


def _histogram(session: Any, name: str, doc: str, value: Any, buckets: tuple[float, ...],
               where: Any) -> HistogramMetricFamily:
    """A cumulative histogram computed by the database in one query."""
    columns = [func.coalesce(func.sum(case((value <= bound, 1), else_=0)), 0)
               for bound in buckets]
    row = session.execute(select(func.count(), func.coalesce(func.sum(value), 0.0), *columns)
                          .where(where)).one()
    count, total, cumulative = row[0], row[1], row[2:]
    pairs = [(str(float(bound)), int(n)) for bound, n in zip(buckets, cumulative, strict=True)]
    pairs.append(("+Inf", int(count)))
    return HistogramMetricFamily(name, doc, buckets=pairs, sum_value=float(total))
