"""Choosing a model backend from what the user typed (`--model` / `FROGNANO_MODEL`)."""

from __future__ import annotations

import json
from pathlib import Path

from workers.models.base import ModelClient, Sampling


class ModelSpecError(ValueError):
    """`--model` names nothing we can use; the message says what would work."""


def build_model(spec: str | None, sampling: Sampling) -> ModelClient:
    """`http(s)://…` → OpenAI-compatible server; `scripted:FILE` → replay a JSON list of turns."""
    if not spec:
        raise ModelSpecError(
            "no model given: pass --model URL (an OpenAI-compatible server such as "
            "llama-server, vLLM or SGLang) or set FROGNANO_MODEL")
    if spec.startswith(("http://", "https://")):
        from workers.models.openai_compat import OpenAICompatClient

        return OpenAICompatClient(spec, sampling=sampling)
    if spec.startswith("scripted:"):
        from workers.models.scripted import ScriptedModel

        path = Path(spec.removeprefix("scripted:"))
        try:
            turns = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ModelSpecError(f"cannot read the script {path}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise ModelSpecError(f"the script {path} is not valid JSON: {exc}") from None
        if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
            raise ModelSpecError(f"the script {path} must be a JSON list of assistant texts")
        return ScriptedModel(turns)
    if spec.endswith(".gguf"):
        raise ModelSpecError(
            f"{spec}: the in-process GGUF backend is not part of this build yet; serve the "
            "GGUF with llama-server and pass its URL, e.g. --model http://127.0.0.1:8080/v1")
    raise ModelSpecError(
        f"{spec!r} is not a model: use an http(s):// URL of an OpenAI-compatible server, "
        "a .gguf path, or scripted:FILE")
