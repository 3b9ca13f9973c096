"""Glue between a running solve and its run record: the transcript feeds the store.

Every transcript record is also stored as a run event (the dashboard shows runs live, even
from another host), `run`/`turn`/`result` records update the run's columns, and the caller
adds what only it knows (PR URL, pipeline outcome). A database failure is logged and never
ends a run: the transcript file stays the source of truth.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runstore.store import RunStore
from workers.agent.transcript import Transcript

log = logging.getLogger(__name__)

# How a pipeline outcome (workers/run_issue.py) maps to a run status.
OUTCOME_STATUS = {
    "pr_opened": "passed",
    "superseded": "superseded",
    "error": "error",
}
# Leaf's runner turns a failing tool into "<ExceptionName>: message" or "Unknown tool: …".
_TOOL_ERROR = re.compile(r"^(Unknown tool: |[A-Z]\w*(Error|Exception): )")


def status_for_outcome(outcome: str) -> str:
    return OUTCOME_STATUS.get(outcome, "failed")


def tool_outcome(observation: dict[str, Any]) -> str:
    if observation.get("error") is not None:
        return "sandbox_error"
    return "error" if _TOOL_ERROR.match(str(observation.get("output") or "")) else "ok"


def tool_stats(records: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[int, float]]:
    """(tool, outcome) → (calls, seconds) over the turns of a transcript."""
    stats: dict[tuple[str, str], tuple[int, float]] = {}
    for record in records:
        if record.get("kind") != "turn":
            continue
        for observation in record.get("observations") or []:
            key = (str(observation.get("name")), tool_outcome(observation))
            calls, seconds = stats.get(key, (0, 0.0))
            stats[key] = (calls + 1, seconds + float(observation.get("seconds") or 0))
    return stats


def sandbox_seconds(records: list[dict[str, Any]]) -> float:
    """Time spent inside the sandbox: tool calls, setup and test runs."""
    total = 0.0
    for record in records:
        kind = record.get("kind")
        if kind == "turn":
            total += sum(float(o.get("seconds") or 0) for o in record.get("observations") or [])
        elif kind in ("setup", "baseline", "tests"):
            total += float(record.get("seconds") or 0)
    return total


class RecordedTranscript(Transcript):
    """A transcript that also hands each record to the run recorder."""

    def __init__(self, path: Path | None, on_record: Callable[[dict[str, Any], int], None]):
        super().__init__(path)
        self._on_record = on_record

    def write(self, kind: str, **fields: Any) -> None:
        super().write(kind, **fields)
        self._on_record(self.records[-1], len(self.records))


class RunRecorder:
    """Writes one run's record. `RunRecorder(None, None)` records nothing."""

    def __init__(self, store: RunStore | None, run_id: int | None) -> None:
        self.store = store if run_id is not None else None
        self.run_id = run_id
        self._records: list[dict[str, Any]] = []
        self._warned = False

    @classmethod
    def start(cls, store: RunStore | None, *, attempt: int | None = None,
              **fields: Any) -> RunRecorder:
        """Create (or, for a redelivered attempt, reset) the record with status running;
        `attempt=None` takes the next attempt number of this repo and issue."""
        if store is None:
            return cls(None, None)
        try:
            if attempt is None:
                attempt = store.next_attempt(fields["repo"], fields["issue"])
                run_id = store.create_run(attempt=attempt, **fields)
            else:
                run_id = store.start_run(attempt=attempt, **fields)
                store.clear_events(run_id)  # a redelivered attempt starts a fresh transcript
        except Exception:
            log.warning("could not create the run record; the run goes on unrecorded",
                        exc_info=True)
            return cls(None, None)
        return cls(store, run_id)

    def transcript(self, path: Path | None) -> Transcript:
        return RecordedTranscript(path, self._on_record) if self.store else Transcript(path)

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

    def _on_record(self, record: dict[str, Any], seq: int) -> None:
        self._records.append(record)
        self._safely(lambda store, run_id: self._store_record(store, run_id, record, seq))

    def _store_record(self, store: RunStore, run_id: int, record: dict[str, Any],
                      seq: int) -> None:
        store.append_event(run_id, seq, record)
        kind = record.get("kind")
        if kind == "run":
            store.update_run(run_id, model=str(record.get("model") or "")[:400] or None,
                             test_command=record.get("test_command"))
        elif kind == "turn":
            usage = record.get("usage") or {}
            store.add_progress(run_id, steps=int(record.get("step") or 0),
                               prompt_tokens=int(usage.get("prompt_tokens") or 0),
                               prompt_tokens_evaluated=int(
                                   usage.get("prompt_tokens_evaluated") or 0),
                               completion_tokens=int(usage.get("completion_tokens") or 0))
        elif kind == "result":
            self._store_result(store, run_id, record)

    def _store_result(self, store: RunStore, run_id: int, record: dict[str, Any]) -> None:
        totals = record.get("totals") or {}
        usage = totals.get("usage") or {}
        fields: dict[str, Any] = {
            "exit_reason": record.get("exit_reason"),
            "tests_before": record.get("baseline"),
            "tests_after": record.get("final"),
            "sandbox_seconds": sandbox_seconds(self._records),
            "error": (record.get("error") or None),
        }
        if totals:
            fields.update(
                seconds=totals.get("seconds"), steps=totals.get("steps", 0),
                attempts=totals.get("attempts", 0),
                prompt_tokens=usage.get("prompt_tokens", 0),
                prompt_tokens_evaluated=usage.get("prompt_tokens_evaluated", 0),
                completion_tokens=usage.get("completion_tokens", 0),
                prompt_seconds=usage.get("prompt_seconds", 0.0),
                completion_seconds=usage.get("completion_seconds", 0.0))
        store.update_run(run_id, **fields)
        store.set_tool_stats(run_id, tool_stats(self._records))

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
