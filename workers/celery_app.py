"""The Celery app: one broker (Redis), two queues.

`<queue>-control` carries the thin accept tasks (authorize, acknowledge,
supersede), so they never wait behind an hour-long GPU run; `<queue>` carries
the runs themselves, one at a time per GPU.
"""

from __future__ import annotations

from celery import Celery

from bot.triggers import ACCEPT_TASK, CONTROL_QUEUE_SUFFIX, RUN_TASK

app = Celery("frognano", include=["workers.tasks"])


def configure(broker_url: str, queue: str, max_run_seconds: int) -> Celery:
    """Apply the settings the reliability story depends on."""
    app.conf.update(
        broker_url=broker_url,
        result_backend=None,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=queue,
        task_routes={
            ACCEPT_TASK: {"queue": queue + CONTROL_QUEUE_SUFFIX},
            RUN_TASK: {"queue": queue},
        },
        # A run is acknowledged only when it ends; a worker that dies mid-run gets its
        # task redelivered instead of losing it.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # Redis redelivers unacknowledged tasks after this long, even while they still
        # run: it must exceed the longest run (the per-issue lock guards the rest).
        broker_transport_options={"visibility_timeout": max_run_seconds + 1800},
        task_soft_time_limit=max_run_seconds,
        task_time_limit=max_run_seconds + 300,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )
    return app
