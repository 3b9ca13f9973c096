"""The run transcript: JSON Lines, one record per event, flushed as it happens.

Record kinds: `run` (header: model, sampling, limits), `baseline` and `tests`
(harness test runs), `turn` (one assistant turn with its tool observations,
usage and timings), `feedback` (the harness's user message after failing tests)
and `result` (the last line: exit reason, verdicts, totals). A crash leaves
every earlier line on disk.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any


class Transcript:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Model output may carry lone surrogates (JSON allows `\udcff`): escape them
            # rather than lose the transcript.
            self._file = path.open("a", encoding="utf-8", errors="backslashreplace")
        self.records: list[dict[str, Any]] = []

    def write(self, kind: str, **fields: Any) -> None:
        record = {"kind": kind, "time": round(time.time(), 3), **fields}
        self.records.append(record)
        if self._file is not None:
            self._file.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            self._file.flush()

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
