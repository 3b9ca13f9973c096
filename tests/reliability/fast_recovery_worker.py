"""`python -m tests.reliability.fast_recovery_worker worker …`: the real `frognano worker`
with its recovery timings shrunk, so that a worker killed with `kill -9` is recovered in
seconds instead of after max_run_seconds + 30 minutes.

Production keeps the same ordering the test does: the broker's visibility timeout
(when an unacknowledged run is redelivered) is longer than the per-issue lock's TTL
(when a dead run's lock lapses), so the redelivered run finds the lock free.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from celery import Celery

from workers import celery_app, coordination

VISIBILITY_TIMEOUT = float(os.environ.get("RELIABILITY_VISIBILITY_TIMEOUT", "12"))
coordination.LOCK_TTL = int(os.environ.get("RELIABILITY_LOCK_TTL", "6"))
coordination.HEARTBEAT_SECONDS = max(1, coordination.LOCK_TTL // 3)
_real_configure = celery_app.configure


def configure(*args: Any, **kwargs: Any) -> Celery:
    app = _real_configure(*args, **kwargs)
    app.conf.broker_transport_options = {**app.conf.broker_transport_options,
                                         "visibility_timeout": VISIBILITY_TIMEOUT}
    return app


celery_app.configure = configure

if __name__ == "__main__":
    from frognano.cli import main

    sys.exit(main(sys.argv[1:]))
