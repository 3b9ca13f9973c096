"""`frognano worker`: the composition root of a worker process.

Two kinds of worker share one Redis: `frognano worker` takes runs, as many at once as
FROGNANO_RUN_WORKERS_PER_GPU (or --concurrency) says, each in a pool process with its own
in-process model on the one GPU this worker is pinned to (CUDA_VISIBLE_DEVICES; `frognano
up` pins its workers itself, frognano/gpus.py), and `frognano worker --control` takes the
fast accept tasks.
"""

from __future__ import annotations

import logging
import os

from bot.settings import BotSettings
from bot.triggers import CONTROL_QUEUE_SUFFIX

log = logging.getLogger(__name__)


class WorkerConfigError(ValueError):
    """The worker cannot start with these settings; the message says what to set."""


def build_runtime(settings: BotSettings):  # -> workers.runtime.Runtime
    import redis

    from bot.github_client import GitHubAppClient
    from frognano.model_host import run_limits
    from frognano.models import llama_settings
    from runstore.store import RunStoreUnavailable, open_run_store
    from solver.defaults import RunDefaults
    from solver.models import ModelMaker, ModelSpec, ModelSpecError, check_model_slots
    from solver.setup.package_index import PackageIndex
    from workers.repo_cache import RepoCache
    from workers.runtime import Runtime
    from workers.tasks import enqueue_run

    private_key = settings.private_key()
    if settings.github_app_id is None or not private_key:
        raise WorkerConfigError("the worker needs GITHUB_APP_ID and GITHUB_PRIVATE_KEY (or "
                                "GITHUB_PRIVATE_KEY_PATH); see the README's GitHub App setup")
    if not settings.model:
        raise WorkerConfigError("set FROGNANO_MODEL to a GGUF path or an OpenAI-compatible URL")
    try:
        model_spec = ModelSpec.parse(settings.model)
        check_model_slots(model_spec, settings.model_slots)
    except ModelSpecError as exc:
        raise WorkerConfigError(str(exc)) from exc
    # Each run worker's own model on its GPU (or the host): the context cut to fit them all.
    limits = run_limits(settings, os.environ, copies=settings.run_workers_per_gpu)
    try:  # the context and the other llama.cpp settings, for a GGUF model
        llama = llama_settings(settings, n_ctx=limits.max_context_tokens)
    except ValueError as exc:
        raise WorkerConfigError(str(exc)) from exc
    try:
        run_store = open_run_store(settings.run_database_url)  # applies pending migrations
    except RunStoreUnavailable as exc:
        raise WorkerConfigError(str(exc)) from exc

    return Runtime(
        github=GitHubAppClient(settings.github_app_id, private_key, settings.github_api_url),
        redis=redis.Redis.from_url(settings.redis_url),
        defaults=RunDefaults(  # every run's, from the settings once
            model_for=ModelMaker(model_spec, llama, settings.chat_template), limits=limits,
            max_run_seconds=settings.max_run_seconds, max_diff_bytes=settings.max_diff_bytes,
            max_candidates=settings.max_candidates, model_slots=settings.model_slots,
            seed=settings.seed, sandbox_backend=settings.sandbox,
            package_index=PackageIndex.from_settings(settings)),
        repo_cache=RepoCache(settings.state_dir / "repos"),
        work_dir=settings.work_dir,  # the same default as `solve`'s (bot/settings.py)
        transcripts_dir=settings.state_dir / "transcripts",
        enqueue_run=enqueue_run,
        queue=settings.queue,
        public_url=settings.public_url,
        run_store=run_store,
    )


def _build_per_process(settings: BotSettings) -> None:
    """Each prefork child builds its own runtime after the fork: its own Redis and database
    connections, GitHub client and model (a CUDA context does not survive a fork)."""
    from celery.signals import worker_process_init

    from workers import runtime

    def install(**_: object) -> None:
        runtime.install(build_runtime(settings))

    worker_process_init.connect(install, weak=False)


def run_worker(settings: BotSettings, *, control: bool, concurrency: int | None,
               loglevel: str = "INFO") -> int:
    from bot.logs import configure_json_logging
    from workers import runtime
    from workers.celery_app import configure

    configure_json_logging(loglevel)  # lines carry the delivery id and the run id
    try:
        rt = build_runtime(settings)  # here too, so a bad setting stops the worker at once
    except WorkerConfigError as exc:
        log.error("%s", exc)
        return 2
    runtime.install(rt)  # the threads pool (control) runs tasks in this process
    if not control:
        _build_per_process(settings)
    app = configure(settings.redis_url, settings.queue, settings.max_run_seconds)
    queue = settings.queue + (CONTROL_QUEUE_SUFFIX if control else "")
    argv = ["worker", "--queues", queue, "--loglevel", loglevel,
            "--hostname", f"{'control' if control else 'runs'}-%h-{id(rt):x}@%h",
            "--without-gossip", "--without-mingle"]
    if control:
        argv += ["--pool", "threads", "--concurrency", str(concurrency or 8)]
    else:
        _warn_if_not_pinned(settings)
        argv += ["--pool", "prefork",
                 "--concurrency", str(concurrency or settings.run_workers_per_gpu)]
    app.worker_main(argv)
    return 0


def _warn_if_not_pinned(settings: BotSettings) -> None:
    """An in-process model on a worker that sees several GPUs is split over all of them by
    llama.cpp: each of its pool processes' models, on every GPU at once."""
    from frognano.gpus import scan_gpus
    from solver.models.spec import ModelSpec

    spec = ModelSpec.read(settings.model)
    if spec is not None and spec.served:
        return  # the model server holds the GPUs
    gpus = scan_gpus(os.environ).gpus
    if len(gpus) > 1:
        log.warning("this worker sees %d GPUs (%s), and llama.cpp splits each of its models "
                    "over all of them: pin it to one with CUDA_VISIBLE_DEVICES=<index> (one "
                    "worker per GPU, as deploy/systemd/frognano-worker@.service does), or run "
                    "`frognano up`, which pins its run workers itself", len(gpus),
                    ", ".join(gpu.describe() for gpu in gpus))
