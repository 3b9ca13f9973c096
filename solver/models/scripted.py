"""A model that replays scripted turns, for deterministic tests.

Each step is the raw text the model would generate after `<think>\\n` (Qwen3-Coder
XML calls included), a callable that builds that text from the messages so far
(so a test model can react to observations), or an exception to raise (to
exercise the runner's error paths). Text goes through the same parser as a
real model's output.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from solver.models.base import FinishReason, Turn, TurnBudget, Usage
from solver.models.qwen3coder import format_assistant_text, parse_assistant_text

ScriptStep = str | Callable[[list[dict[str, Any]]], str] | BaseException

DEFAULT_FINAL_ANSWER = "No further changes."


def think_and_call(reasoning: str, name: str, **args: Any) -> str:
    """A turn that reasons, then makes one call."""
    return format_assistant_text(reasoning, [(name, args)])


def think_and_calls(reasoning: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """A turn that reasons, then makes several calls in order."""
    return format_assistant_text(reasoning, calls)


def final_answer(content: str, reasoning: str = "Done.") -> str:
    """A turn with no tool call, which ends the run."""
    return format_assistant_text(reasoning, [], content)


def count_tokens(text: str) -> int:
    """Deterministic stand-in for a tokenizer: four characters a token."""
    return max(1, len(text) // 4)


class ScriptedModel:
    """Replays `steps` one per `complete` call, then answers without calls."""

    name = "scripted"

    def __init__(self, steps: Iterable[ScriptStep],
                 final_text: str | None = None, seed: int | None = None) -> None:
        self._steps = list(steps)
        self.seed = seed  # recorded like a real model's; `build_model` picks a script by it
        self._final_text = final_text or final_answer(DEFAULT_FINAL_ANSWER)
        self._next_call = 0
        self._offset = 0
        self.requests: list[list[dict[str, Any]]] = []  # the messages of every call, for asserts

    @property
    def remaining(self) -> int:
        return max(0, len(self._steps) - (len(self.requests) - self._offset))

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 budget: TurnBudget) -> Turn:
        if not any(m.get("role") == "assistant" for m in messages):
            # A new conversation replays the script from its start, so one resident model
            # (as a worker keeps) serves run after run.
            self._offset = len(self.requests)
        index = len(self.requests) - self._offset
        self.requests.append(json.loads(json.dumps(messages)))  # a snapshot, not a live view
        step = self._steps[index] if index < len(self._steps) else self._final_text
        if isinstance(step, BaseException):
            raise step
        text = step(messages) if callable(step) else step

        completion_tokens = count_tokens(text)
        finish_reason: FinishReason = "stop"
        if completion_tokens > budget.max_tokens:
            # Mimic a backend hitting its cap: the text is cut mid-way.
            text = text[: budget.max_tokens * 4]
            completion_tokens = budget.max_tokens
            finish_reason = "length"

        parsed = parse_assistant_text(text, tools, self._new_id)
        if parsed.tool_calls and finish_reason == "stop":
            finish_reason = "tool_calls"
        prompt_tokens = count_tokens(json.dumps(messages, ensure_ascii=False))
        return Turn(
            content=parsed.content,
            reasoning=parsed.reasoning,
            tool_calls=parsed.tool_calls,
            usage=Usage(prompt_tokens=prompt_tokens, prompt_tokens_evaluated=prompt_tokens,
                        completion_tokens=completion_tokens),
            finish_reason=finish_reason,
            raw_text=text,
            errors=parsed.errors,
        )

    def _new_id(self) -> str:
        self._next_call += 1
        return f"call_{self._next_call}"
