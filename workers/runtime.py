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
from solver.hostgit import DEFAULT_MAX_DIFF_BYTES
from solver.limits import PRESETS, Limits
from solver.models.base import ModelClient
from solver.setup.package_index import NO_INDEX, PackageIndex
from workers.repo_cache import RepoCache

if TYPE_CHECKING:
    from runstore.store import RunStore


@dataclass
class Runtime:
    github: GitHubApi
    redis: Any  # redis.Redis
    # A client sampling with this seed (None: the backend's own draw). Cheap to call: an
    # in-process GGUF is loaded once per process (solver/models/llama_resident.py).
    model_factory: Callable[[int | None], ModelClient]
    repo_cache: RepoCache
    work_dir: Path  # reachable by the sandbox uid
    transcripts_dir: Path
    enqueue_run: Callable[[dict[str, Any]], None]
    queue: str = "frognano"
    sandbox_backend: str = "bubblewrap"
    public_url: str | None = None
    max_run_seconds: int = 2 * 3600
    max_diff_bytes: int = DEFAULT_MAX_DIFF_BYTES  # a bigger change is never published
    # A run's budgets: the operator's preset (FROGNANO_LIMITS), its context the model's
    # (FROGNANO_N_CTX, or cut to the model host's memory: solver/limits.py).
    limits: Limits = PRESETS["evaluation"]
    status_interval: float = 10.0  # seconds between edits of the status comment
    run_store: RunStore | None = None  # run records for the dashboard and metrics
    package_index: PackageIndex = NO_INDEX  # the setup phase's pip (FROGNANO_PIP_*)
    # Best-of-N (solver/run.py): how many candidates the model serves at once
    # (FROGNANO_MODEL_SLOTS), the most a run may make (FROGNANO_MAX_CANDIDATES),
    # and the first candidate's seed (FROGNANO_SEED; None: drawn per run).
    model_slots: int = 1
    max_candidates: int = 1
    seed: int | None = None

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
