"""The model seam: one assistant turn at a time.

Messages use the OpenAI chat shape, which is also what the chat template of the
Qwen3.5 family consumes: assistant messages carry `content`, `reasoning_content`
and `tool_calls` (arguments as a JSON string); tool results are `role: tool`
messages with the call id.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

FinishReason = Literal["stop", "tool_calls", "length"]


class ModelError(Exception):
    """Base class of model infrastructure failures."""


class ModelQueryError(ModelError):
    """The model could not be queried (endpoint down, garbage answer, timeout)."""


class ContextOverflow(ModelError):
    """The prompt no longer fits the model's context window."""


class ModelLoadError(ModelError):
    """A local model cannot be loaded: missing or unreadable file, not a GGUF, an
    architecture llama.cpp does not know, no chat template. The message says which."""


@dataclass(frozen=True)
class Sampling:
    """Sampling as in Microsoft's evaluation config (docs/LEAF_CONTRACT.md §4); sent
    explicitly. The in-process backend applies them in vLLM's order: temperature first,
    then min-p, top-k and top-p (`solver.models.llama_resident.SamplerChain`)."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    enable_thinking: bool = True
    seed: int | None = None


@dataclass(frozen=True)
class TurnBudget:
    """Limits for one assistant turn."""

    max_tokens: int = 8192
    timeout: float = 600.0
    # Called as the turn's tokens stream in, with the count so far: a turn that runs long
    # is then visible while it runs (the terminal's live line). A backend that cannot
    # stream never calls it.
    on_tokens: Callable[[int], None] | None = field(default=None, compare=False)


@dataclass
class ToolCall:
    """One tool call as parsed from the model.

    `arguments` is always a dict: arguments that were not valid JSON or not an
    object become `{}` (docs/LEAF_CONTRACT.md §3), and `raw_arguments` keeps the text.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str = ""


@dataclass
class Usage:
    """Token and time accounting of one turn."""

    prompt_tokens: int = 0  # prompt tokens sent
    prompt_tokens_evaluated: int = 0  # prompt tokens the backend actually had to evaluate
    completion_tokens: int = 0
    prompt_seconds: float = 0.0
    completion_seconds: float = 0.0
    full_reevaluation: bool = False  # the backend lost its cache and re-rendered everything

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.prompt_tokens_evaluated += other.prompt_tokens_evaluated
        self.completion_tokens += other.completion_tokens
        self.prompt_seconds += other.prompt_seconds
        self.completion_seconds += other.completion_seconds

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Turn:
    """One assistant turn."""

    content: str
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: FinishReason = "stop"
    raw_text: str | None = None  # the generated text, where the backend has it
    errors: list[str] = field(default_factory=list)  # malformed calls, reported back to the model
    notes: list[str] = field(default_factory=list)  # backend diagnostics for the transcript only

    def to_message(self) -> dict[str, Any]:
        """The assistant message to append to the history."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": json.dumps(call.arguments, ensure_ascii=False),
                    },
                }
                for call in self.tool_calls
            ]
        return message


class TurnCutOff(ModelQueryError):
    """The turn stopped before its end-of-turn token because its time ran out. `partial`
    holds what was generated until then (finish reason "length"): the transcript keeps
    it, and the run says how many tokens the model wrote without ending its turn."""

    def __init__(self, message: str, partial: Turn) -> None:
        super().__init__(message)
        self.partial = partial


class ModelClient(Protocol):
    """Anything that can produce the next assistant turn."""

    name: str

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 budget: TurnBudget) -> Turn: ...
