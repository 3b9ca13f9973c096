"""JSON log lines, each carrying the webhook delivery id and the run id it was written for.

A log line quotes what others wrote (issue titles, the model's commands, test output,
GitHub's errors), and whoever reads it decoded (`jq -r`, a log viewer, the terminal of
`frognano solve`) would have its escape sequences obeyed: every text goes through
bot/inert.py's `visible` first, the JSON lines and the plain ones alike."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from bot.inert import visible

_delivery_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "frognano_delivery_id", default=None)
_run_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "frognano_run_id", default=None)

# Attributes every LogRecord has; anything else came in through `extra=` and is logged.
_RECORD_FIELDS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


@contextmanager
def delivery_context(delivery_id: str | None) -> Iterator[None]:
    """Tag every log line written inside (threads started by anyio inherit it)."""
    token = _delivery_id.set(delivery_id)
    try:
        yield
    finally:
        _delivery_id.reset(token)


@contextmanager
def run_context(run_id: int | None) -> Iterator[None]:
    """Tag every log line written inside with the run record's id (set by the worker)."""
    token = _run_id.set(run_id)
    try:
        yield
    finally:
        _run_id.reset(token)


class DeliveryIdFilter(logging.Filter):
    """Stamp records with the current delivery and run ids when they are emitted, not when
    formatted (a handler may format later, in another context)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "delivery_id", None) is None:
            record.delivery_id = _delivery_id.get()
        if getattr(record, "run_id", None) is None:
            record.run_id = _run_id.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                  + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": visible(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and key not in entry and value is not None:
                entry[key] = visible(value) if isinstance(value, str) else value
        if record.exc_info:
            entry["exception"] = visible(self.formatException(record.exc_info))
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """Plain `LEVEL: message` lines for a person's terminal, control characters shown."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


def json_handler(stream: IO[str] | None = None) -> logging.Handler:
    """One JSON object a line on `stream` (stderr by default), with the delivery id."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(DeliveryIdFilter())
    return handler


def configure_text_logging(level: int | str = logging.WARNING) -> None:
    """The root logger to stderr as plain lines (the `frognano` command's default)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter())
    logging.basicConfig(level=level, handlers=[handler])


def configure_json_logging(level: int | str = logging.INFO, stream: IO[str] | None = None) -> None:
    """Send the root logger (uvicorn's included) to `stream` as JSON lines."""
    root = logging.getLogger()
    root.handlers[:] = [json_handler(stream)]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
