"""ScriptedModel: deterministic turns through the real parser."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sandbox.schemas import TOOLS
from solver.models.base import ModelQueryError, TurnBudget
from solver.models.scripted import (
    DEFAULT_FINAL_ANSWER,
    ScriptedModel,
    final_answer,
    think_and_call,
    think_and_calls,
)

BUDGET = TurnBudget()
TASK = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Fix add()."}]


def test_raw_text_turn_is_parsed() -> None:
    model = ScriptedModel([
        "Looking at the bug.\n</think>\n\n<tool_call>\n<function=Read>\n"
        "<parameter=file_path>\ncalc.py\n</parameter>\n<parameter=limit>\n20\n</parameter>\n"
        "</function>\n</tool_call>",
    ])
    turn = model.complete(TASK, TOOLS, BUDGET)
    assert turn.reasoning == "Looking at the bug."
    assert turn.content == ""
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("call_1", "Read", {"file_path": "calc.py", "limit": 20})]
    assert turn.finish_reason == "tool_calls"
    assert turn.raw_text is not None and turn.raw_text.startswith("Looking")
    message = turn.to_message()
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {
        "file_path": "calc.py", "limit": 20}


def test_helpers_and_exhaustion() -> None:
    model = ScriptedModel([
        think_and_call("Run tests.", "Bash", command="pytest -q", timeout=60),
        think_and_calls("Fix it.", [
            ("Edit", {"file_path": "calc.py", "old_string": "a - b", "new_string": "a + b"}),
            ("Bash", {"command": "pytest -q"}),
        ]),
        final_answer("Fixed add()."),
    ])
    messages = list(TASK)
    turns = []
    for _ in range(5):
        turns.append(model.complete(messages, TOOLS, BUDGET))
        messages.append(turns[-1].to_message())
    assert [[c.name for c in t.tool_calls] for t in turns] == [
        ["Bash"], ["Edit", "Bash"], [], [], []]
    assert turns[0].tool_calls[0].arguments == {"command": "pytest -q", "timeout": 60}
    assert [c.id for c in turns[1].tool_calls] == ["call_2", "call_3"]
    assert (turns[2].content, turns[2].finish_reason) == ("Fixed add().", "stop")
    assert turns[3].content == DEFAULT_FINAL_ANSWER
    assert turns[4].finish_reason == "stop" and turns[4].tool_calls == []
    assert model.remaining == 0 and len(model.requests) == 5


def test_a_new_conversation_replays_the_script() -> None:
    model = ScriptedModel([think_and_call("Look.", "Bash", command="ls"),
                           final_answer("Done.")])
    for _ in range(2):  # one resident model, two runs
        first = model.complete(TASK, TOOLS, BUDGET)
        second = model.complete([*TASK, first.to_message()], TOOLS, BUDGET)
        assert [c.name for c in first.tool_calls] == ["Bash"]
        assert second.content == "Done."


def test_callable_step_sees_observations() -> None:
    def react(messages: list[dict[str, Any]]) -> str:
        last = messages[-1]["content"]
        if "Exit code: 1" in last:
            return think_and_call("Still failing.", "Read", file_path="calc.py")
        return final_answer("All green.")

    model = ScriptedModel([react, react])
    failing = [*TASK, {"role": "tool", "tool_call_id": "c", "content": "Exit code: 1\n..."}]
    assert model.complete(failing, TOOLS, BUDGET).tool_calls[0].name == "Read"
    passing = [*TASK, {"role": "tool", "tool_call_id": "c", "content": "Exit code: 0\n..."}]
    assert model.complete(passing, TOOLS, BUDGET).content == "All green."
    assert model.requests[0][-1]["content"].startswith("Exit code: 1")


def test_usage_is_deterministic() -> None:
    text = think_and_call("r", "Glob", pattern="*.py")
    usage_a = ScriptedModel([text]).complete(TASK, TOOLS, BUDGET).usage
    usage_b = ScriptedModel([text]).complete(TASK, TOOLS, BUDGET).usage
    assert usage_a == usage_b
    expected_prompt = len(json.dumps(TASK, ensure_ascii=False)) // 4
    assert usage_a.prompt_tokens == usage_a.prompt_tokens_evaluated == expected_prompt
    assert usage_a.completion_tokens == len(text) // 4
    assert ScriptedModel([""]).complete([], TOOLS, BUDGET).usage.prompt_tokens == 1


def test_malformed_call_reports_errors() -> None:
    # A real call with no usable function name is an error the model is told about ...
    model = ScriptedModel(["r\n</think>\n<tool_call>\n<function=>\n</function>\n</tool_call>"])
    turn = model.complete(TASK, TOOLS, BUDGET)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("", {})]
    assert turn.errors and turn.finish_reason == "tool_calls"
    # ... while `<tool_call>` not followed by `<function=` is text, as vLLM's parser reads it.
    prose = ScriptedModel(["r\n</think>\n<tool_call>\nnonsense\n</tool_call>"]).complete(
        TASK, TOOLS, BUDGET)
    assert prose.tool_calls == [] and not prose.errors and prose.finish_reason == "stop"


def test_token_cap_cuts_the_turn() -> None:
    text = think_and_call("x" * 400, "Bash", command="ls")
    turn = ScriptedModel([text]).complete(TASK, TOOLS, TurnBudget(max_tokens=10))
    assert turn.finish_reason == "length"
    assert turn.usage.completion_tokens == 10
    assert turn.tool_calls == []


def test_exception_step_is_raised() -> None:
    model = ScriptedModel([ModelQueryError("endpoint down")])
    with pytest.raises(ModelQueryError, match="endpoint down"):
        model.complete(TASK, TOOLS, BUDGET)
    assert model.name == "scripted"
