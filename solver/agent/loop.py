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
from solver.agent.run_events import (
    EventOutput,
    ModelFailed,
    Observation,
    ToolStarted,
    TurnDone,
    TurnStarted,
    TurnTokens,
)
from solver.limits import Limits
from solver.models.base import (
    ContextOverflow,
    ModelClient,
    ModelError,
    ToolCall,
    Turn,
    TurnBudget,
    TurnCutOff,
    Usage,
)

ExitReason = Literal[
    "agent", "max_turns", "max_context_len", "max_tokens_per_turn",
    "llm_query_error", "turn_timeout", "tool_error", "cancelled", "max_time",
]


@dataclass
class LoopState:
    """What survives between the agent rounds of one run."""

    messages: list[dict[str, Any]]
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    tool_calls: dict[str, int] = field(default_factory=dict)
    model_seconds: float = 0.0
    tool_seconds: float = 0.0
    last_error: str = ""
    last_answer: str = ""  # the newest non-empty assistant content


def run_agent(model: ModelClient, sandbox: Sandbox, state: LoopState, limits: Limits,
              events: EventOutput, *, round_index: int = 0, deadline: float | None = None,
              should_stop: Callable[[], bool] = lambda: False) -> ExitReason:
    """Run turns until the model stops calling tools or a limit is reached; `deadline` is a
    time.monotonic() instant (the harness's, from `limits.max_seconds`)."""
    while True:
        if should_stop():
            return "cancelled"
        if state.steps >= limits.max_steps:
            return "max_turns"
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return "max_time"
        step = state.steps + 1
        budget = TurnBudget(
            max_tokens=limits.max_tokens_per_turn,
            timeout=limits.turn_timeout if remaining is None else min(limits.turn_timeout,
                                                                      remaining),
            on_tokens=_token_reporter(events, step, round_index),
        )
        events.emit(TurnStarted(step=step, round=round_index))
        started = time.monotonic()
        try:
            turn = model.complete(state.messages, TOOLS, budget)
        except ModelError as exc:
            return _model_failed(exc, state, events, round_index, time.monotonic() - started)
        model_seconds = time.monotonic() - started
        _count_turn(turn, state, model_seconds)

        truncated = turn.finish_reason == "length"
        if truncated:
            # A call cut off by the token cap is not run: its arguments are incomplete.
            turn.tool_calls = []
            # Kept for the end of the run if it ends here; a later turn that ends as
            # it should clears it (the harness sends a truncated run back to the model).
            state.last_error = without_end_of_turn(turn, f"the cap of "
                                                   f"{limits.max_tokens_per_turn:,} tokens a turn")
        elif state.last_error.startswith(_NO_END_OF_TURN):
            state.last_error = ""
        state.messages.append(turn.to_message())

        observations, tool_error = _run_calls(turn.tool_calls, sandbox, state, events)
        events.emit(TurnDone(step=state.steps, round=round_index, turn=turn,
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


_NO_END_OF_TURN = "the model generated "


def _token_reporter(events: EventOutput, step: int, round_index: int) -> Callable[[int], None]:
    """What the backend calls as tokens stream: a live event for the terminal's line."""
    def report(tokens: int) -> None:
        events.emit(TurnTokens(step=step, round=round_index, tokens=tokens))
    return report


def without_end_of_turn(turn: Turn, why: str) -> str:
    """In plain words, a turn that ended without its end-of-turn token: thousands of tokens
    that never end are what a chat template that does not fit the model looks like."""
    return (f"{_NO_END_OF_TURN}{turn.usage.completion_tokens:,} tokens without ending its "
            f"turn ({why}); its chat template may not match the model")


def _count_turn(turn: Turn, state: LoopState, model_seconds: float) -> None:
    state.steps += 1
    state.model_seconds += model_seconds
    state.usage.add(turn.usage)
    if turn.content:
        state.last_answer = turn.content


def _model_failed(exc: ModelError, state: LoopState, events: EventOutput, round_index: int,
                  model_seconds: float) -> ExitReason:
    """End the loop on a model failure; a turn cut off by its time keeps its partial
    text (a turn record, in the transcript and on the dashboard) and its tokens. A turn cut
    off by its time is `turn_timeout`: the server answered, the turn was too long."""
    reason: ExitReason = "max_context_len" if isinstance(exc, ContextOverflow) \
        else "turn_timeout" if isinstance(exc, TurnCutOff) else "llm_query_error"
    state.last_error = str(exc)
    if isinstance(exc, TurnCutOff):
        turn = exc.partial
        turn.tool_calls = []  # never run a call the time cut off
        _count_turn(turn, state, model_seconds)
        state.messages.append(turn.to_message())
        state.last_error = without_end_of_turn(turn, f"the turn's time ran out after "
                                               f"{model_seconds:.0f}s")
        turn.notes.append(state.last_error)
        events.emit(TurnDone(step=state.steps, round=round_index, turn=turn, observations=[],
                             model_seconds=model_seconds))
    events.emit(ModelFailed(step=state.steps if isinstance(exc, TurnCutOff) else
                            state.steps + 1, round=round_index, reason=reason,
                            error=state.last_error))
    return reason


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
