"""The Qwen3-Coder XML parser (docs/LEAF_CONTRACT.md §5), including hostile file contents.

Case-by-case agreement with vLLM's parser is in tests/unit/solver/agent/test_fidelity.py.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from sandbox.schemas import TOOLS
from solver.models.qwen3coder import (
    format_assistant_text,
    format_tool_call,
    parse_assistant_text,
)


def ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"call_{next(counter)}"


def parse(text: str, **kwargs: Any):
    return parse_assistant_text(text, TOOLS, ids(), **kwargs)


def calls_of(text: str) -> list[tuple[str, dict[str, Any]]]:
    parsed = parse(text)
    assert parsed.errors == []
    return [(call.name, call.arguments) for call in parsed.tool_calls]


def test_reasoning_content_and_one_call() -> None:
    text = (
        "The bug is in subtraction.\n</think>\n\nLet me look.\n\n"
        "<tool_call>\n<function=Read>\n<parameter=file_path>\nsrc/app.py\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    parsed = parse(text)
    assert parsed.reasoning == "The bug is in subtraction."
    assert parsed.content == "Let me look."
    assert [(c.id, c.name, c.arguments) for c in parsed.tool_calls] == [
        ("call_1", "Read", {"file_path": "src/app.py"})]
    assert parsed.errors == []


def test_leading_think_tag_is_dropped() -> None:
    parsed = parse("<think>\nhmm\n</think>\n\nThe answer is 4.")
    assert (parsed.reasoning, parsed.content, parsed.tool_calls) == ("hmm", "The answer is 4.", [])


def test_several_calls_in_order_with_typed_values() -> None:
    text = format_assistant_text("plan", [
        ("Read", {"file_path": "a.py", "offset": 10, "limit": 5}),
        ("Edit", {"file_path": "a.py", "old_string": "a - b", "new_string": "a + b",
                  "replace_all": True}),
        ("Bash", {"command": "pytest -q", "timeout": 30.5}),
        ("Glob", {"pattern": "**/*.py"}),
    ])
    assert calls_of(text) == [
        ("Read", {"file_path": "a.py", "offset": 10, "limit": 5}),
        ("Edit", {"file_path": "a.py", "old_string": "a - b", "new_string": "a + b",
                  "replace_all": True}),
        ("Bash", {"command": "pytest -q", "timeout": 30.5}),
        ("Glob", {"pattern": "**/*.py"}),
    ]


@pytest.mark.parametrize(("raw", "expected"), [
    ("true", True), ("True", True), ("TRUE", True), ("false", False), ("False", False),
    ("yes", False), ("1", False)])  # vLLM: only "true" in any case is true
def test_boolean_values(raw: str, expected: Any) -> None:
    text = ("x</think><tool_call>\n<function=Edit>\n<parameter=replace_all>\n"
            f"{raw}\n</parameter>\n</function>\n</tool_call>")
    assert calls_of(text)[0][1] == {"replace_all": expected}


@pytest.mark.parametrize(("tool", "param", "raw", "expected"), [
    ("Read", "offset", "12", 12),
    ("Read", "offset", " 12 ", 12),
    ("Read", "offset", "12.0", "12.0"),  # vLLM's int(); Leaf then raises ValueError
    ("Read", "offset", "null", None),
    ("Read", "offset", "twelve", "twelve"),
    ("Bash", "timeout", "30", 30),
    ("Bash", "timeout", "2.5", 2.5),
    ("Bash", "timeout", "nan", "nan"),
    ("Bash", "timeout", "inf", "inf"),
    ("Bash", "timeout", "12.0", 12),
    ("Bash", "command", "null", "null"),
    ("Bash", "command", "42", "42"),  # strings stay strings
    ("Bash", "timeout_ms", "5000", "5000"),  # unknown parameters keep their text
])
def test_number_values(tool: str, param: str, raw: str, expected: Any) -> None:
    text = (f"x</think><tool_call>\n<function={tool}>\n<parameter={param}>\n{raw}\n"
            "</parameter>\n</function>\n</tool_call>")
    assert calls_of(text)[0][1] == {param: expected}


def test_object_and_array_values() -> None:
    tools = [{"type": "function", "function": {"name": "Conf", "parameters": {
        "type": "object",
        "properties": {"opts": {"type": "object"}, "items": {"type": "array"},
                       "bad": {"type": "object"}, "either": {"type": ["integer", "string"]}},
    }}}]
    text = ("x</think><tool_call>\n<function=Conf>\n"
            '<parameter=opts>\n{"a": 1, "b": [true, null]}\n</parameter>\n'
            "<parameter=items>\n['x', 2, None]\n</parameter>\n"
            "<parameter=bad>\n{not json\n</parameter>\n"
            "<parameter=either>\nseven\n</parameter>\n"
            "</function>\n</tool_call>")
    parsed = parse_assistant_text(text, tools, ids())
    assert parsed.tool_calls[0].arguments == {
        "opts": {"a": 1, "b": [True, None]}, "items": ["x", 2, None], "bad": "{not json",
        "either": "seven"}


def test_exactly_one_newline_is_stripped() -> None:
    value = "\n\n  indented\n\n"
    text = format_assistant_text("r", [("Write", {"file_path": "f.txt", "content": value})])
    assert calls_of(text) == [("Write", {"file_path": "f.txt", "content": value})]
    raw = ("r</think><tool_call>\n<function=Write>\n<parameter=file_path>f.txt</parameter>\n"
           "<parameter=content>\n\n x \n\n</parameter>\n</function>\n</tool_call>")
    assert calls_of(raw)[0][1] == {"file_path": "f.txt", "content": "\n x \n"}


def test_call_inside_reasoning_does_not_run() -> None:
    draft = format_tool_call("Bash", {"command": "rm -rf /"})
    text = f"I could do\n{draft}\nbut no.\n</think>\n\nNothing to do."
    parsed = parse(text)
    assert parsed.tool_calls == []
    assert "rm -rf" in parsed.reasoning
    assert parsed.content == "Nothing to do."


def test_no_think_end_while_thinking_is_all_reasoning() -> None:
    parsed = parse("still thinking about the <b>problem</b>")
    assert (parsed.reasoning, parsed.content, parsed.tool_calls) == (
        "still thinking about the <b>problem</b>", "", [])


def test_no_think_end_but_a_call_follows() -> None:
    text = "Read it.\n" + format_tool_call("Read", {"file_path": "a.py"})
    parsed = parse(text)
    assert parsed.reasoning == "Read it."
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("Read", {"file_path": "a.py"})]


def test_thinking_disabled_text_is_content() -> None:
    parsed = parse("Plain answer.", thinking=False)
    assert (parsed.reasoning, parsed.content) == ("", "Plain answer.")


@pytest.mark.parametrize("cut", [
    "</tool_call>", "</function>\n</tool_call>", "</parameter>\n</function>\n</tool_call>"])
def test_missing_closing_tags_at_end(cut: str) -> None:
    full = format_assistant_text("r", [("Bash", {"command": "ls -la", "description": "list"})])
    assert full.endswith(cut)
    assert calls_of(full[: -len(cut)]) == [("Bash", {"command": "ls -la", "description": "list"})]


def test_missing_parameter_end_between_parameters() -> None:
    text = ("r</think><tool_call>\n<function=Read>\n<parameter=file_path>\na.py\n"
            "<parameter=limit>\n5\n</parameter>\n</function>\n</tool_call>")
    assert calls_of(text) == [("Read", {"file_path": "a.py", "limit": 5})]


def test_missing_tool_call_end_between_calls() -> None:
    text = ("r</think><tool_call>\n<function=Read>\n<parameter=file_path>\na.py\n</parameter>\n"
            "</function>\n<tool_call>\n<function=Read>\n<parameter=file_path>\nb.py\n"
            "</parameter>\n</function>\n</tool_call>")
    assert calls_of(text) == [("Read", {"file_path": "a.py"}), ("Read", {"file_path": "b.py"})]


def test_truncated_mid_value() -> None:
    text = "r</think><tool_call>\n<function=Write>\n<parameter=file_path>\nx.py\n</parameter>\n" \
           "<parameter=content>\ndef f():\n    return"
    assert calls_of(text) == [("Write", {"file_path": "x.py", "content": "def f():\n    return"})]


NASTY_PYTHON = '''"""Tests of a tool-call parser."""

SAMPLE = """<tool_call>
<function=Write>
<parameter=file_path>
a.py
</parameter>
<parameter=content>
x = 1
</parameter>
</function>
</tool_call>"""


def test_it():
    assert "</parameter>" in SAMPLE and '<parameter=content>' in SAMPLE
    assert parse("</function>") is None
'''

NASTY_XML = """<?xml version="1.0"?>
<config>
  <parameter=debug>true</parameter>
  <function>main</function>
</config>
</parameter>
</function>
"""


@pytest.mark.parametrize("content", [NASTY_PYTHON, NASTY_XML, "</parameter>",
                                     "a\n</parameter>\n</function>\n</tool_call>\nb",
                                     "s = '''</parameter>\n</function>\n</tool_call>\n"
                                     "<tool_call>'''\n",
                                     "<html><body>héllo 🐸 世界</body></html>\n"])
def test_write_content_with_literal_tags_round_trips(content: str) -> None:
    args = {"file_path": "tests/test_parser.py", "content": content}
    text = format_assistant_text("Writing the file.", [("Write", args)], "Here goes.")
    parsed = parse(text)
    assert parsed.errors == []
    assert parsed.content == "Here goes."
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("Write", args)]


def test_edit_with_literal_tags_then_another_call() -> None:
    edit = {"file_path": "p.py", "old_string": 'END = "</parameter>"\n',
            "new_string": 'END = "</parameter>"  # <function=x>\n</function>\n',
            "replace_all": False}
    write = {"file_path": "q.xml", "content": NASTY_XML}
    text = format_assistant_text("two edits", [("Edit", edit), ("Write", write),
                                               ("Bash", {"command": "pytest"})])
    assert calls_of(text) == [("Edit", edit), ("Write", write), ("Bash", {"command": "pytest"})]


def test_repeated_parameter_name_is_not_a_boundary() -> None:
    # A second <parameter=content> can only be file text: `content` is already being read.
    text = ("r</think><tool_call>\n<function=Write>\n<parameter=file_path>\nf\n</parameter>\n"
            "<parameter=content>\nA\n</parameter>\n<parameter=content>\nB\n</parameter>\n"
            "</function>\n</tool_call>")
    assert calls_of(text)[0][1]["content"] == "A\n</parameter>\n<parameter=content>\nB"


def test_text_after_the_last_call_is_content() -> None:
    text = format_assistant_text("r", [("Bash", {"command": "echo </parameter>"})])
    parsed = parse(text + "\nI ran it.")
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [
        ("Bash", {"command": "echo </parameter>"})]
    assert parsed.content == "I ran it."


def test_unknown_tool_keeps_string_arguments() -> None:
    text = ("r</think><tool_call>\n<function=Delete>\n<parameter=path>\n/\n</parameter>\n"
            "<parameter=force>\ntrue\n</parameter>\n</function>\n</tool_call>")
    assert calls_of(text) == [("Delete", {"path": "/", "force": "true"})]


def test_function_without_name_is_an_error_call() -> None:
    parsed = parse("r</think>\n<tool_call>\n<function=>\n<parameter=a>\n1\n</parameter>\n"
                   "</function>\n</tool_call>")
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("", {})]
    assert len(parsed.errors) == 1 and "no function name" in parsed.errors[0]


def test_block_without_function_is_prose_and_the_next_call_still_parses() -> None:
    # No `<function=` after `<tool_call>`: not a call (vLLM makes none either).
    text = ("r</think>\n<tool_call>\nplease run ls\n</tool_call>\n"
            + format_tool_call("Read", {"file_path": "a.py"}))
    parsed = parse(text)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("Read", {"file_path": "a.py"})]
    assert parsed.errors == []
    assert parsed.content == "<tool_call>\nplease run ls\n</tool_call>"


def test_malformed_real_call_is_an_error_and_the_next_call_still_parses() -> None:
    text = ("r</think>\n<tool_call>\n<function={{ tool.name }}>\n<parameter=a>\n1\n"
            "</parameter>\n</function>\n</tool_call>\n"
            + format_tool_call("Read", {"file_path": "a.py"}))
    parsed = parse(text)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [
        ("{{ tool.name }}", {}), ("Read", {"file_path": "a.py"})]
    assert len(parsed.errors) == 1 and "tool call 1: invalid function name" in parsed.errors[0]
    assert parsed.content == ""


def test_garbage_inside_function_keeps_the_name() -> None:
    text = ("r</think>\n<tool_call>\n<function=Bash>\ncommand: ls\n</function>\n</tool_call>")
    parsed = parse(text)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("Bash", {})]
    assert "unexpected text" in parsed.errors[0]


def test_hermes_json_call_is_accepted() -> None:
    text = 'r</think>\n<tool_call>\n{"name": "Glob", "arguments": {"pattern": "*.md"}}\n' \
           "</tool_call>"
    assert calls_of(text) == [("Glob", {"pattern": "*.md"})]


def test_unicode_everywhere() -> None:
    args = {"file_path": "docs/日本語.md", "content": "🐸 grenouille — ça marche\n\tτ=2π\n"}
    text = format_assistant_text("Réflexion 🤔", [("Write", args)])
    parsed = parse(text)
    assert parsed.reasoning == "Réflexion 🤔"
    assert parsed.tool_calls[0].arguments == args


def test_end_of_turn_token_is_ignored() -> None:
    parsed = parse("r\n</think>\n\nDone.<|im_end|>")
    assert parsed.content == "Done."


def test_format_tool_call_is_canonical() -> None:
    assert format_tool_call("Edit", {"file_path": "a", "replace_all": True, "n": [1]}) == (
        "<tool_call>\n<function=Edit>\n<parameter=file_path>\na\n</parameter>\n"
        "<parameter=replace_all>\nTrue\n</parameter>\n<parameter=n>\n[1]\n</parameter>\n"
        "</function>\n</tool_call>")


def test_many_calls_separated_by_prose() -> None:
    calls = [("Read", {"file_path": f"f{i}.py"}) for i in range(300)]
    text = "r</think>" + "\nnext\n".join(format_tool_call(n, a) for n, a in calls) + "\ndone"
    parsed = parse(text)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == calls
    assert parsed.content.split() == ["next"] * 299 + ["done"]


@pytest.mark.parametrize("trailer", ["", "\nthe end"])
def test_write_of_a_file_full_of_example_calls(trailer: str) -> None:
    examples = "\nnext\n".join(format_tool_call("Read", {"file_path": f"f{i}"}) for i in range(50))
    args = {"file_path": "examples.md", "content": examples + trailer}
    text = format_assistant_text("r", [("Write", args), ("Bash", {"command": "ls"})])
    assert calls_of(text) == [("Write", args), ("Bash", {"command": "ls"})]
