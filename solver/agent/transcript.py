"""The run transcript: JSON Lines, one record per event, flushed as it happens.

The records are the run's events (solver/agent/run_events.py) that have a kind:
`run` (header: model, sampling, limits), `baseline` and `tests`
(harness test runs), `turn` (one assistant turn with its tool observations,
usage and timings), `feedback` (the harness's user message after failing tests)
and `result` (the run's last line: exit reason, verdicts, totals; only a review's
`replay`, the tests re-run on its change replayed on a moved branch, follows it,
workers/publish/review.py). A crash leaves
every earlier line on disk. Every record is bounded: a string longer than
`MAX_STRING_CHARS` keeps its head and a marker saying how much was cut, and a record
whose JSON still exceeds `MAX_RECORD_CHARS` is cut harder, so a model that writes
150 MB cannot put 150 MB into host memory, the transcript or the database. The records
of one transcript together are bounded too (`MAX_TRANSCRIPT_CHARS`): past it, a record
keeps only its kind, time and a note, so hundreds of turns of 4 MB each cannot add up;
the header and the last records (`result`, `replay`) are always kept whole.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from solver.agent.run_events import Event

MAX_STRING_CHARS = 1_000_000
MAX_RECORD_CHARS = 4_000_000
MAX_TRANSCRIPT_CHARS = 64_000_000
_ALWAYS_WHOLE = frozenset({"run", "result", "replay"})
_HARD_STRING_CHARS = 20_000  # per string, for a record that is still over the limit


def _cut(value: Any, limit: int) -> Any:
    """`value` with every string longer than `limit` cut to its head and a marker."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return value[:limit] + f"\n…[frognano: {len(value) - limit} more characters cut]"
    if isinstance(value, dict):
        return {key: _cut(item, limit) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_cut(item, limit) for item in value]
    return value


# A map of more entries than this, each a string (a huge suite's test id → status), keeps
# only those that are not "passed" in a record over the limit: the figures and failures
# of a 100,000-test run stay in its record (issue 29 §1).
THIN_ENTRIES = 10_000


def _thin(value: Any, path: str, thinned: dict[str, int]) -> Any:
    """`value` with each such map thinned; `thinned`: each one's path → its entries."""
    if not isinstance(value, dict):
        return value
    if len(value) > THIN_ENTRIES and all(isinstance(v, str) for v in value.values()):
        thinned[path] = len(value)
        return dict([(k, v) for k, v in value.items() if v != "passed"][:THIN_ENTRIES])
    return {key: _thin(item, f"{path}.{key}" if path else str(key), thinned)
            for key, item in value.items()}


def bounded_record(record: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The record as kept and its JSON line, both within the limits."""
    record = _cut(record, MAX_STRING_CHARS)
    line = json.dumps(record, ensure_ascii=False, default=str)
    if len(line) > MAX_RECORD_CHARS:
        thinned: dict[str, int] = {}
        record = _thin(record, "", thinned)
        if thinned:  # said in the record: which maps lost their passing entries
            record["thinned"] = thinned
            line = json.dumps(record, ensure_ascii=False, default=str)
    if len(line) > MAX_RECORD_CHARS:
        record = _cut(record, _HARD_STRING_CHARS)
        line = json.dumps(record, ensure_ascii=False, default=str)
        if len(line) > MAX_RECORD_CHARS:  # thousands of fields: keep only the envelope
            record = {key: record[key] for key in ("kind", "time")}
            record["cut"] = f"record of {len(line)} characters dropped"
            line = json.dumps(record, ensure_ascii=False)
    return record, line


class Transcript:
    def __init__(self, path: Path | None, max_chars: int = MAX_TRANSCRIPT_CHARS) -> None:
        self.path, self.max_chars = path, max_chars
        self.chars = 0  # of every line written so far
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Model output may carry lone surrogates (JSON allows `\udcff`): escape them
            # rather than lose the transcript.
            self._file = path.open("a", encoding="utf-8", errors="backslashreplace")
        self.records: list[dict[str, Any]] = []

    def write(self, kind: str, **fields: Any) -> None:
        record, line = bounded_record({"kind": kind, "time": round(time.time(), 3), **fields})
        if kind not in _ALWAYS_WHOLE and self.chars + len(line) > self.max_chars:
            record = {"kind": kind, "time": record["time"],
                      "cut": f"record of {len(line)} characters dropped: the transcript "
                             f"passed {self.max_chars} characters"}
            line = json.dumps(record, ensure_ascii=False)
        self.chars += len(line) + 1
        self.records.append(record)
        if self._file is not None:
            self._file.write(line + "\n")
            self._file.flush()

    def emit(self, event: Event) -> None:
        """As an output of the run's events: the recorded ones become lines."""
        record = event.record()
        if record is not None:
            self.write(record.pop("kind"), **record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Transcript:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_transcript(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
