"""What a worker process needs to run tasks, built once by the composition root.

Tasks receive ids; everything else (GitHub client, Redis, the model, paths)
comes from here, so the pipeline is tested by building a Runtime by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.github_api import GitHubApi
from solver.defaults import RunDefaults
from workers.repo_cache import RepoCache

if TYPE_CHECKING:
    from runstore.store import RunStore


@dataclass
class Runtime:
    github: GitHubApi
    redis: Any  # redis.Redis
    # The operator's word for every run (the model, limits, sandbox, best of N), built
    # once from the settings (frognano/worker_command.py) and handed whole to each run.
    defaults: RunDefaults
    repo_cache: RepoCache
    work_dir: Path  # reachable by the sandbox uid
    transcripts_dir: Path
    enqueue_run: Callable[[dict[str, Any]], None]
    queue: str = "frognano"
    public_url: str | None = None
    status_interval: float = 10.0  # seconds between edits of the status comment
    run_store: RunStore | None = None  # run records for the dashboard and metrics

    def queue_length(self) -> int:
        return int(self.redis.llen(self.queue))


_runtime: Runtime | None = None


def install(runtime: Runtime) -> None:
    global _runtime
    _runtime = runtime


def current() -> Runtime:
    if _runtime is None:
        raise RuntimeError("the worker runtime is not configured; start it with "
                           "`frognano worker`")
    return _runtime
