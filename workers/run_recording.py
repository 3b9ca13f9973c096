"""Glue between a running solve and its run record: the run's events feed the store.

The recorder is one of the run's outputs (solver/agent/run_events.py), next to the
transcript file: every recorded event is also stored as a run event (the dashboard shows
runs live, even from another host), and the typed events update the run's columns
(model, progress, tool statistics, result). The caller adds what only it knows (PR URL,
pipeline outcome). A database failure is logged and never ends a run: the transcript
file stays the source of truth.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from runstore.store import RunStore
from solver.agent.run_events import (
    BaselineDone,
    Event,
    RunAborted,
    RunFinished,
    RunStarted,
    SetupDone,
    TestsJudged,
    TurnDone,
)
from solver.agent.transcript import bounded_record

log = logging.getLogger(__name__)

# How a pipeline outcome (workers/run_issue.py) maps to a run status.
OUTCOME_STATUS = {
    "pr_opened": "passed",
    "superseded": "superseded",
    "cancelled": "superseded",  # stopped by a newer generation that runs nothing
    "pushed": "passed",  # a review's change, pushed on top of the PR branch
    "error": "error",
}


def status_for_outcome(outcome: str) -> str:
    return OUTCOME_STATUS.get(outcome, "failed")


def tool_stats(turns: Iterable[TurnDone]) -> dict[tuple[str, str], tuple[int, float]]:
    """(tool, outcome) → (calls, seconds); the outcome is the runner's own word on each
    call (`Observation.outcome`), never a guess from its text."""
    stats: dict[tuple[str, str], tuple[int, float]] = {}
    for turn in turns:
        for observation in turn.observations:
            key = (observation.name, observation.outcome)
            calls, seconds = stats.get(key, (0, 0.0))
            stats[key] = (calls + 1, seconds + observation.seconds)
    return stats


def sandbox_seconds(event: Event) -> float:
    """Time an event spent inside the sandbox: tool calls, setup and test runs."""
    if isinstance(event, TurnDone):
        return event.tool_seconds
    if isinstance(event, SetupDone):
        return event.result.seconds
    if isinstance(event, BaselineDone | TestsJudged):
        return event.tests.seconds
    return 0.0


class RunRecorder:
    """Writes one run's record. `RunRecorder(None, None)` records nothing."""

    def __init__(self, store: RunStore | None, run_id: int | None) -> None:
        self.store = store if run_id is not None else None
        self.run_id = run_id
        self._seq = 0
        self._turns: list[TurnDone] = []
        self._sandbox_seconds = 0.0
        self._warned = False

    @classmethod
    def start(cls, store: RunStore | None, *, run_number: int | None = None,
              **fields: Any) -> RunRecorder:
        """Create (or, for a redelivered run, reset) the record with status running;
        `run_number=None` takes the next run number of this repo and issue."""
        if store is None:
            return cls(None, None)
        try:
            if run_number is None:
                run_number = store.next_run_number(fields["repo"], fields["issue"])
                run_id = store.create_run(run_number=run_number, **fields)
            else:
                run_id = store.start_run(run_number=run_number, **fields)
                store.clear_events(run_id)  # a redelivered run starts a fresh transcript
        except Exception:
            log.warning("could not create the run record; the run goes on unrecorded",
                        exc_info=True)
            return cls(None, None)
        return cls(store, run_id)

    def emit(self, event: Event) -> None:
        record = event.record()
        if self.store is None or record is None:
            return
        self._seq += 1
        seq, (stored, _) = self._seq, bounded_record(record)
        self._sandbox_seconds += sandbox_seconds(event)
        if isinstance(event, TurnDone):
            self._turns.append(event)
        self._safely(lambda store, run_id: self._store(store, run_id, event, stored, seq))

    def set_pr_url(self, url: str) -> None:
        self._safely(lambda store, run_id: store.update_run(run_id, pr_url=url))

    def finish(self, status: str, *, outcome: str | None = None,
               error: str | None = None) -> None:
        fields: dict[str, Any] = {"status": status}
        if outcome is not None:
            fields["outcome"] = outcome
        if error:
            fields["error"] = error[:4000]
        self._safely(lambda store, run_id: store.update_run(run_id, **fields))

    def _store(self, store: RunStore, run_id: int, event: Event, record: dict[str, Any],
               seq: int) -> None:
        store.append_event(run_id, seq, record)
        if isinstance(event, RunStarted):
            store.update_run(run_id, model=event.model[:400] or None,
                             test_command=event.test_command)
        elif isinstance(event, TurnDone):
            usage = event.turn.usage
            store.add_progress(run_id, steps=event.step, prompt_tokens=usage.prompt_tokens,
                               prompt_tokens_evaluated=usage.prompt_tokens_evaluated,
                               completion_tokens=usage.completion_tokens)
        elif isinstance(event, RunFinished):
            self._store_result(store, run_id, event, record)
        elif isinstance(event, RunAborted):
            store.update_run(run_id, exit_reason=event.exit_reason, error=event.error or None,
                             sandbox_seconds=self._sandbox_seconds)
            store.set_tool_stats(run_id, tool_stats(self._turns))

    def _store_result(self, store: RunStore, run_id: int, event: RunFinished,
                      record: dict[str, Any]) -> None:
        result, usage = event.result, event.result.usage
        store.update_run(
            run_id, exit_reason=result.exit_reason,
            # As recorded: bounded like every record (solver/agent/transcript.py).
            tests_before=record.get("baseline"), tests_after=record.get("final"),
            sandbox_seconds=self._sandbox_seconds, error=result.error or None,
            seconds=round(result.seconds, 3), steps=result.steps, rounds=result.rounds,
            prompt_tokens=usage.prompt_tokens,
            prompt_tokens_evaluated=usage.prompt_tokens_evaluated,
            completion_tokens=usage.completion_tokens, prompt_seconds=usage.prompt_seconds,
            completion_seconds=usage.completion_seconds)
        store.set_tool_stats(run_id, tool_stats(self._turns))

    def _safely(self, write: Callable[[RunStore, int], None]) -> None:
        if self.store is None or self.run_id is None:
            return
        try:
            write(self.store, self.run_id)
        except Exception:
            # The run matters more than its record; say so once, not on every turn.
            log.warning("could not update run record %s", self.run_id,
                        exc_info=not self._warned)
            self._warned = True
