"""The model backends, and `build_model` beside them (as mini-swe-agent's `get_model`):
choosing one from what the user typed (`--model` / `FROGNANO_MODEL`, parsed once into a
`ModelSpec`: solver/models/spec.py), and `ModelMaker`, the one factory of a run's models."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from solver.models.base import ModelClient, Sampling
from solver.models.spec import ModelSpec, ModelSpecError

__all__ = ["ModelMaker", "ModelSpec", "ModelSpecError", "build_model", "check_model_slots"]

if TYPE_CHECKING:
    from solver.models.llama_resident import LlamaSettings


def check_model_slots(spec: ModelSpec, slots: int) -> None:
    """FROGNANO_MODEL_SLOTS above 1 needs a model that serves that many streams: candidates
    sharing one in-process context would interleave their turns, and each turn would
    re-evaluate the other's whole prompt."""
    if slots > 1 and spec.in_process:
        raise ModelSpecError(
            f"FROGNANO_MODEL_SLOTS={slots} needs a model server with that many parallel "
            "slots (e.g. `llama-server --parallel N`, set FROGNANO_MODEL to its URL); a "
            "GGUF model in this process serves one stream: set it to 1")


@dataclass(frozen=True)
class ModelMaker:
    """The one factory of a run's models, for `solve` and the worker alike: a fresh client
    per candidate, sampling with that candidate's seed."""

    spec: ModelSpec
    llama: LlamaSettings | None = None  # an in-process GGUF's llama.cpp settings
    chat_template: Path | None = None  # a Jinja file, for a GGUF that carries none

    def __call__(self, seed: int | None = None) -> ModelClient:
        return build_model(self.spec, Sampling(seed=seed), self.llama,
                           chat_template=self.chat_template)


def build_model(spec: ModelSpec, sampling: Sampling,
                llama_settings: LlamaSettings | None = None,
                chat_template: Path | None = None) -> ModelClient:
    """A server → OpenAI-compatible client; a GGUF → llama-cpp-python in this process (with
    `llama_settings`, and `chat_template`, a Jinja file, for a GGUF that carries none); a
    script → replay a JSON list of turns (or pick one of a list of such lists by the
    seed)."""
    if chat_template is not None and not spec.in_process:
        raise ModelSpecError(
            f"a chat template ({chat_template}) applies only to a .gguf model run in this "
            "process; a model server renders its own")
    if spec.served:
        from solver.models.openai_compat import OpenAICompatClient

        return OpenAICompatClient(spec.target, sampling=sampling)
    if spec.kind == "scripted":
        return _scripted(spec.path, sampling)
    from solver.models.base import ModelLoadError
    from solver.models.chat_template import load_chat_template
    from solver.models.llama_cpp import LlamaCppModel

    try:
        template = load_chat_template(chat_template) if chat_template else None
        return LlamaCppModel(spec.target, settings=llama_settings, sampling=sampling,
                             chat_template=template)
    except ModelLoadError as exc:
        raise ModelSpecError(str(exc)) from None


def _scripted(path: Path, sampling: Sampling) -> ModelClient:
    from solver.models.scripted import ScriptedModel

    try:
        turns = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelSpecError(f"cannot read the script {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ModelSpecError(f"the script {path} is not valid JSON: {exc}") from None
    if isinstance(turns, list) and turns and all(isinstance(t, list) for t in turns):
        # One script per seed (seed mod their count), as a real model samples a
        # different run per seed: a run's candidates (seed + k) replay different scripts.
        turns = turns[(sampling.seed or 0) % len(turns)]
    if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
        raise ModelSpecError(f"the script {path} must be a JSON list of assistant texts "
                             "(or a list of such lists, one per seed)")
    return ScriptedModel(turns, seed=sampling.seed)
