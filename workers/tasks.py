"""The Celery tasks: thin, idempotent, and given ids only."""

from __future__ import annotations

from typing import Any

from celery import Task

from bot.triggers import ACCEPT_TASK, RUN_TASK, Trigger
from workers import coordination, runtime
from workers.accept import accept_trigger
from workers.celery_app import app
from workers.run_issue import run_issue


@app.task(name=ACCEPT_TASK)
def accept_trigger_task(**kwargs: Any) -> str:
    return accept_trigger(runtime.current(), Trigger.from_kwargs(kwargs))


# max_retries=None: a busy lock is retried until the holder lets go or its TTL lapses;
# every retry first checks whether this run was superseded or already done.
@app.task(name=RUN_TASK, bind=True, max_retries=None)
def run_issue_task(self: Task, *, generation: int, **kwargs: Any) -> str:
    outcome = run_issue(runtime.current(), Trigger.from_kwargs(kwargs), generation)
    if outcome == "busy":
        raise self.retry(countdown=coordination.LOCK_RETRY_SECONDS)
    return outcome


def enqueue_run(kwargs: dict[str, Any]) -> None:
    run_issue_task.apply_async(kwargs=kwargs)
