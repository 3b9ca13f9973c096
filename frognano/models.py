"""The llama.cpp settings of a run, from the environment's settings and the command's
flags (the backends and `build_model` are in solver/models/)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.settings import LlamaEnvSettings
    from solver.models.llama_resident import LlamaSettings


def llama_fields(env: LlamaEnvSettings, **flags: Any) -> dict[str, Any]:
    """The llama.cpp settings read from the environment, with the flags given (not None)
    laid over them: what `LlamaSettings` is built from, in `solve` and the worker."""
    return {**env.llama_fields(), **{k: v for k, v in flags.items() if v is not None}}


def llama_settings(env: LlamaEnvSettings, **flags: Any) -> LlamaSettings:
    from solver.models.llama_resident import LlamaSettings

    return LlamaSettings(**llama_fields(env, **flags))
