"""The Celery tasks: thin, idempotent, and given ids only."""

from __future__ import annotations

from typing import Any

from bot.triggers import ACCEPT_TASK, RUN_TASK, Trigger
from workers import runtime
from workers.accept import accept_trigger
from workers.celery_app import app
from workers.run_issue import run_issue


@app.task(name=ACCEPT_TASK)
def accept_trigger_task(**kwargs: Any) -> str:
    return accept_trigger(runtime.current(), Trigger.from_kwargs(kwargs))


@app.task(name=RUN_TASK)
def run_issue_task(*, generation: int, **kwargs: Any) -> str:
    return run_issue(runtime.current(), Trigger.from_kwargs(kwargs), generation)


def enqueue_run(kwargs: dict[str, Any]) -> None:
    run_issue_task.apply_async(kwargs=kwargs)
