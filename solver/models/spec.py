"""What `--model` / `FROGNANO_MODEL` names, parsed once into a typed spec: an
OpenAI-compatible server (its URL), a GGUF file run in this process, or a scripted model
(a JSON file of turns, for tests). Everyone who asks "is it a server?" reads the kind
here, instead of testing the text's prefix again."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ModelKind = Literal["server", "gguf", "scripted"]
SCRIPTED_PREFIX = "scripted:"
NO_MODEL = ("no model given: pass --model URL (an OpenAI-compatible server such as "
            "llama-server, vLLM or SGLang) or set FROGNANO_MODEL")


class ModelSpecError(ValueError):
    """`--model` names nothing we can use; the message says what would work."""


@dataclass(frozen=True)
class ModelSpec:
    kind: ModelKind
    target: str  # the server's URL, or the file (the GGUF, the script)

    @classmethod
    def parse(cls, text: str | None) -> ModelSpec:
        """`http(s)://…` → a server; `scripted:FILE` → a script; `PATH.gguf` → a GGUF
        file; anything else is refused, saying what would work."""
        if not text:
            raise ModelSpecError(NO_MODEL)
        if text.startswith(("http://", "https://")):
            return cls("server", text)
        if text.startswith(SCRIPTED_PREFIX):
            return cls("scripted", text.removeprefix(SCRIPTED_PREFIX))
        if text.endswith(".gguf"):
            return cls("gguf", text)
        raise ModelSpecError(
            f"{text!r} is not a model: use an http(s):// URL of an OpenAI-compatible "
            "server, a .gguf path, or scripted:FILE")

    @classmethod
    def read(cls, text: str | None) -> ModelSpec | None:
        """The spec of a setting that may be unset or wrong (`doctor`, `up`, the worker's
        GPU checks): None then, and the caller says what it lacks."""
        try:
            return cls.parse(text)
        except ModelSpecError:
            return None

    @property
    def served(self) -> bool:
        """A model in another process, which holds its own GPUs and serves many streams."""
        return self.kind == "server"

    @property
    def in_process(self) -> bool:
        """A GGUF loaded by this process: its weights and cache live here."""
        return self.kind == "gguf"

    @property
    def path(self) -> Path:
        return Path(self.target)

    def __str__(self) -> str:
        return SCRIPTED_PREFIX + self.target if self.kind == "scripted" else self.target
