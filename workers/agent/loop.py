"""Leaf's inner loop (docs/LEAF_CONTRACT.md §4): model turn → tools, until a turn has no tool call.

The loop knows only two seams: a `ModelClient` and a `Sandbox`. Tool failures are
observations for the model; infrastructure failures end the loop with a named
exit reason, never an exception, so every run leaves a transcript.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sandbox.base import Sandbox, SandboxError
from sandbox.schemas import TOOLS
from workers.agent.transcript import Transcript
from workers.models.base import ContextOverflow, ModelClient, ModelError, TurnBudget, Usage

ExitReason = Literal[
    "agent", "max_turns", "max_context_len", "max_tokens_per_turn",
    "llm_query_error", "tool_error", "cancelled", "max_time",
]

EventSink = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class LoopLimits:
    max_steps: int = 100
    max_context_tokens: int = 65_536
    max_tokens_per_turn: int = 8_192
    deadline: float | None = None  # a time.monotonic() instant
    turn_timeout: float = 600.0


@dataclass
class LoopState:
    """What survives between the agent attempts of one run."""

    messages: list[dict[str, Any]]
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    tool_calls: dict[str, int] = field(default_factory=dict)
    model_seconds: float = 0.0
    tool_seconds: float = 0.0
    last_error: str = ""


def no_events(kind: str, data: dict[str, Any]) -> None:
    return None


def run_agent(model: ModelClient, sandbox: Sandbox, state: LoopState, limits: LoopLimits,
              transcript: Transcript, *, attempt: int = 0, on_event: EventSink = no_events,
              should_stop: Callable[[], bool] = lambda: False) -> ExitReason:
    """Run turns until the model stops calling tools or a limit is reached."""
    while True:
        if should_stop():
            return "cancelled"
        if state.steps >= limits.max_steps:
            return "max_turns"
        remaining = None if limits.deadline is None else limits.deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return "max_time"
        budget = TurnBudget(
            max_tokens=limits.max_tokens_per_turn,
            timeout=limits.turn_timeout if remaining is None else min(limits.turn_timeout,
                                                                      remaining),
        )
        on_event("turn_start", {"step": state.steps + 1, "attempt": attempt})
        started = time.monotonic()
        try:
            turn = model.complete(state.messages, TOOLS, budget)
        except ContextOverflow as exc:
            state.last_error = str(exc)
            transcript.write("error", step=state.steps + 1, attempt=attempt,
                             reason="max_context_len", error=str(exc))
            return "max_context_len"
        except ModelError as exc:
            state.last_error = str(exc)
            transcript.write("error", step=state.steps + 1, attempt=attempt,
                             reason="llm_query_error", error=str(exc))
            return "llm_query_error"
        model_seconds = time.monotonic() - started
        state.steps += 1
        state.model_seconds += model_seconds
        state.usage.add(turn.usage)
        on_event("turn", {"step": state.steps, "usage": turn.usage, "seconds": model_seconds,
                          "calls": [call.name for call in turn.tool_calls]})

        truncated = turn.finish_reason == "length"
        if truncated:
            # A call cut off by the token cap is not run: its arguments are incomplete.
            turn.tool_calls = []
        state.messages.append(turn.to_message())

        observations, tool_error = _run_calls(turn.tool_calls, sandbox, state, on_event)
        transcript.write(
            "turn", step=state.steps, attempt=attempt,
            assistant={"content": turn.content, "reasoning": turn.reasoning,
                       "raw_text": turn.raw_text},
            tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments,
                         "raw_arguments": c.raw_arguments} for c in turn.tool_calls],
            parse_errors=turn.errors, notes=turn.notes, observations=observations,
            finish_reason=turn.finish_reason, usage=turn.usage.to_dict(),
            seconds={"model": round(model_seconds, 4),
                     "tools": round(sum(o["seconds"] for o in observations), 4)},
        )
        if tool_error:
            state.last_error = tool_error
            return "tool_error"
        if truncated:
            return "max_tokens_per_turn"
        if turn.usage.prompt_tokens + turn.usage.completion_tokens >= limits.max_context_tokens:
            return "max_context_len"
        if not turn.tool_calls:
            return "agent"


def _run_calls(calls: list[Any], sandbox: Sandbox, state: LoopState,
               on_event: EventSink) -> tuple[list[dict[str, Any]], str]:
    """Execute a turn's calls in order; returns the observations and an infra error, if any."""
    observations: list[dict[str, Any]] = []
    for call in calls:
        on_event("tool", {"step": state.steps, "name": call.name, "arguments": call.arguments})
        started = time.monotonic()
        try:
            output = sandbox.run_tool(call.name, call.arguments)
        except SandboxError as exc:
            seconds = time.monotonic() - started
            observations.append({"id": call.id, "name": call.name, "output": None,
                                 "error": str(exc), "seconds": round(seconds, 4)})
            return observations, f"sandbox failed running {call.name}: {exc}"
        seconds = time.monotonic() - started
        state.tool_seconds += seconds
        state.tool_calls[call.name] = state.tool_calls.get(call.name, 0) + 1
        state.messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        observations.append({"id": call.id, "name": call.name, "output": output,
                             "seconds": round(seconds, 4)})
    return observations, ""
