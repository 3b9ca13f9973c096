"""How much context a run gets, measured where the settings are read (the composition
root): FROGNANO_N_CTX or `--n-ctx` when set, else the preset's (FROGNANO_LIMITS) cut to
what the model host's memory holds (solver/limits.choose_context). `solve`, the worker
and `frognano doctor` ask here, so all three name the same choice."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from bot.settings import BotSettings
from frognano.gpus import scan_gpus
from solver.limits import PRESETS, ContextChoice, Limits, ModelHost, choose_context
from solver.models.spec import ModelSpec

log = logging.getLogger(__name__)


def host_memory_bytes() -> int:
    """This host's physical memory, where an in-process model without a GPU lives."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def model_host(settings: BotSettings, environ: Mapping[str, str], *, copies: int,
               memory_bytes: int | None = None) -> ModelHost | None:
    """Where an in-process GGUF's weights and cache live: the smallest GPU the worker may
    be pinned to (nvidia-smi), else this host's memory (`memory_bytes` in its place);
    None for a model in another process (a server, a script) or a file not there."""
    spec = ModelSpec.read(settings.model)
    if spec is None or not spec.in_process:
        return None
    try:
        weights = spec.path.stat().st_size
    except OSError:
        return None
    kv = settings.kv_cache_type
    if settings.n_gpu_layers != 0:
        gpus = scan_gpus(environ).gpus
        sized = [gpu for gpu in gpus if gpu.memory_mib is not None]
        if gpus and len(sized) == len(gpus):
            smallest = min(sized, key=lambda gpu: gpu.memory_mib or 0)
            return ModelHost((smallest.memory_mib or 0) * 2**20,
                             f"the smallest GPU ({smallest.describe()})", weights, copies, kv)
    memory = host_memory_bytes() if memory_bytes is None else memory_bytes
    return ModelHost(memory, f"this host's memory ({memory / 2**30:.1f} GiB, no GPU)",
                     weights, copies, kv)


def run_context(settings: BotSettings, environ: Mapping[str, str], *, copies: int,
                n_ctx: int | None = None, memory_bytes: int | None = None) -> ContextChoice:
    """`n_ctx` (the flag) > FROGNANO_N_CTX > the preset's context cut to the memory."""
    if n_ctx is not None:
        return choose_context(n_ctx, None, set_by="--n-ctx")
    if settings.n_ctx is not None:
        return choose_context(settings.n_ctx, None, set_by="FROGNANO_N_CTX")
    wanted = PRESETS[settings.limits].max_context_tokens
    return choose_context(wanted, model_host(settings, environ, copies=copies,
                                             memory_bytes=memory_bytes))


def run_limits(settings: BotSettings, environ: Mapping[str, str], *, copies: int,
               n_ctx: int | None = None) -> Limits:
    """The preset with the context chosen, logged with its reason."""
    choice = run_context(settings, environ, copies=copies, n_ctx=n_ctx)
    log.info("context: %s", choice.reason)
    return PRESETS[settings.limits].over({"max_context_tokens": choice.tokens})
