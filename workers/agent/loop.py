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
from workers.agent.events import (
    EventOutput,
    ModelFailed,
    Observation,
    ToolStarted,
    TurnDone,
    TurnStarted,
)
from workers.models.base import (
    ContextOverflow,
    ModelClient,
    ModelError,
    ToolCall,
    TurnBudget,
    Usage,
)

ExitReason = Literal[
    "agent", "max_turns", "max_context_len", "max_tokens_per_turn",
    "llm_query_error", "tool_error", "cancelled", "max_time",
]


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
    last_answer: str = ""  # the newest non-empty assistant content


def run_agent(model: ModelClient, sandbox: Sandbox, state: LoopState, limits: LoopLimits,
              events: EventOutput, *, attempt: int = 0,
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
        events.emit(TurnStarted(step=state.steps + 1, attempt=attempt))
        started = time.monotonic()
        try:
            turn = model.complete(state.messages, TOOLS, budget)
        except ModelError as exc:
            reason: ExitReason = "max_context_len" if isinstance(exc, ContextOverflow) \
                else "llm_query_error"
            state.last_error = str(exc)
            events.emit(ModelFailed(step=state.steps + 1, attempt=attempt, reason=reason,
                                    error=str(exc)))
            return reason
        model_seconds = time.monotonic() - started
        state.steps += 1
        state.model_seconds += model_seconds
        state.usage.add(turn.usage)
        if turn.content:
            state.last_answer = turn.content

        truncated = turn.finish_reason == "length"
        if truncated:
            # A call cut off by the token cap is not run: its arguments are incomplete.
            turn.tool_calls = []
        state.messages.append(turn.to_message())

        observations, tool_error = _run_calls(turn.tool_calls, sandbox, state, events)
        events.emit(TurnDone(step=state.steps, attempt=attempt, turn=turn,
                             observations=observations, model_seconds=model_seconds))
        if tool_error:
            state.last_error = tool_error
            return "tool_error"
        if truncated:
            return "max_tokens_per_turn"
        if turn.usage.prompt_tokens + turn.usage.completion_tokens >= limits.max_context_tokens:
            return "max_context_len"
        if not turn.tool_calls:
            return "agent"


def _run_calls(calls: list[ToolCall], sandbox: Sandbox, state: LoopState,
               events: EventOutput) -> tuple[list[Observation], str]:
    """Execute a turn's calls in order; returns the observations and an infra error, if any."""
    observations: list[Observation] = []
    for call in calls:
        events.emit(ToolStarted(step=state.steps, name=call.name, arguments=call.arguments))
        started = time.monotonic()
        try:
            result = sandbox.call_tool(call.name, call.arguments)
        except SandboxError as exc:
            observations.append(Observation(call.id, call.name, None,
                                            time.monotonic() - started,
                                            sandbox_error=str(exc)))
            return observations, f"sandbox failed running {call.name}: {exc}"
        seconds = time.monotonic() - started
        state.tool_seconds += seconds
        state.tool_calls[call.name] = state.tool_calls.get(call.name, 0) + 1
        state.messages.append({"role": "tool", "tool_call_id": call.id,
                               "content": result.output})
        observations.append(Observation(call.id, call.name, result.output, seconds,
                                        failed=result.error))
    return observations, ""
