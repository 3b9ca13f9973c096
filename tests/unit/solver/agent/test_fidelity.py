"""Fidelity to what FrogNano met in training: the tool-call parser, case by case.

Microsoft evaluated FrogNano behind vLLM with `--tool-call-parser qwen3_coder`.
Each row below is a model text and the calls vLLM's parser returns for it,
recorded by running vLLM 0.20.0's `vllm/tool_parsers/qwen3coder_tool_parser.py`
(the last release where that parser is plain Python) with
`python -m tests.support.vllm_parser_reference PATH_TO_VLLM_SOURCE`, which re-checks
the `vllm` column. Where our parser deliberately returns something else, the row
carries `ours` and the reason; everywhere else the two must agree exactly.
The reproductions of issue 11 are the rows marked "issue 11".
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest

from sandbox.schemas import TOOLS
from solver.models.qwen3coder import parse_assistant_text

Calls = list[tuple[str, dict[str, Any]]]


def call(name: str, **params: str) -> str:
    """A call exactly as the chat template writes one (a value between two newlines)."""
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def read(path: str) -> str:
    return call("Read", file_path=path)


@dataclass(frozen=True)
class Case:
    id: str
    text: str  # the content part of a turn (after `</think>`)
    vllm: Calls  # what vLLM 0.20.0's qwen3_coder parser returns
    ours: Calls | None = None  # set only where we deliberately differ
    why: str = ""


EDIT = {"file_path": "a.py", "old_string": "x", "new_string": "y"}

CASES: list[Case] = [
    Case("single call", read("src/app.py"), [("Read", {"file_path": "src/app.py"})]),
    Case("no call", "The answer is 4.", []),
    Case("content before the call", "Let me look.\n\n" + read("a.py"),
         [("Read", {"file_path": "a.py"})]),
    Case("text after the last call", read("a.py") + "\nDone reading.",
         [("Read", {"file_path": "a.py"})]),
    Case("two calls", read("a.py") + "\n" + read("b.py"),
         [("Read", {"file_path": "a.py"}), ("Read", {"file_path": "b.py"})]),
    Case("two calls, blank line between", read("a.py") + "\n\n" + read("b.py"),
         [("Read", {"file_path": "a.py"}), ("Read", {"file_path": "b.py"})]),
    Case("issue 11.1: text between two calls", read("a.py") + "\nand also\n" + read("b.py"),
         [("Read", {"file_path": "a.py"}), ("Read", {"file_path": "b.py"})]),
    Case("issue 11.2: <tool_call> in a final answer",
         "The bot replies with <tool_call> blocks that hold the call.", []),
    Case("issue 11.2: <tool_call> in prose, then a real call",
         "I'll use a <tool_call> to read it.\n" + read("a.py"),
         [("Read", {"file_path": "a.py"})]),
    Case("issue 11.3: Bash with timeout_ms (not in the schema; Leaf honours it)",
         call("Bash", command="sleep 100", timeout_ms="5000"),
         [("Bash", {"command": "sleep 100", "timeout_ms": "5000"})]),
    Case("undeclared parameter first (Leaf's `path` alias)",
         call("Read", path="a.py", limit="3"), [("Read", {"path": "a.py", "limit": 3})]),
    Case("issue 11.4: integer 12.0 stays a string (Leaf then raises ValueError)",
         call("Read", file_path="a.py", offset="12.0"),
         [("Read", {"file_path": "a.py", "offset": "12.0"})]),
    Case("integer with spaces and a sign (Python's int)",
         call("Read", file_path="a.py", offset=" 12 ", limit="+5"),
         [("Read", {"file_path": "a.py", "offset": 12, "limit": 5})]),
    Case("integer null", call("Read", file_path="a.py", offset="null"),
         [("Read", {"file_path": "a.py", "offset": None})]),
    Case("issue 11.4: boolean yes is false", call("Edit", **EDIT, replace_all="yes"),
         [("Edit", {**EDIT, "replace_all": False})]),
    Case("boolean True", call("Edit", **EDIT, replace_all="True"),
         [("Edit", {**EDIT, "replace_all": True})]),
    Case("number with a fraction", call("Bash", command="make", timeout="2.5"),
         [("Bash", {"command": "make", "timeout": 2.5})]),
    Case("integral number becomes an int", call("Bash", command="make", timeout="30.0"),
         [("Bash", {"command": "make", "timeout": 30})]),
    Case("number in exponent form", call("Bash", command="make", timeout="1e3"),
         [("Bash", {"command": "make", "timeout": 1000})]),
    Case("number nan stays a string", call("Bash", command="make", timeout="nan"),
         [("Bash", {"command": "make", "timeout": "nan"})]),
    Case("string null", call("Bash", command="null"), [("Bash", {"command": None})],
         ours=[("Bash", {"command": "null"})],
         why="vLLM 0.20 turns `null` into None for every type, so Write would store 'None' "
             "for a file whose content is `null`; vLLM's later parser keeps strings, as we do"),
    Case("unknown tool: every value a string", call("Delete", path="/", force="true"),
         [("Delete", {"path": "/", "force": "true"})]),
    Case("exactly one newline stripped on each side",
         call("Write", file_path="f.txt", content="\n\n  x\n\n"),
         [("Write", {"file_path": "f.txt", "content": "\n\n  x\n\n"})]),
    Case("values on the tag lines",
         "<tool_call>\n<function=Write>\n<parameter=file_path>f.txt</parameter>\n"
         "<parameter=content>x</parameter>\n</function>\n</tool_call>",
         [("Write", {"file_path": "f.txt", "content": "x"})]),
    Case("empty value", call("Write", file_path="empty.txt", content=""),
         [("Write", {"file_path": "empty.txt", "content": ""})]),
    Case("multi-line Edit", call("Edit", file_path="a.py", old_string="def f():\n    return a - b",
                                 new_string="def f():\n    return a + b", replace_all="false"),
         [("Edit", {"file_path": "a.py", "old_string": "def f():\n    return a - b",
                    "new_string": "def f():\n    return a + b", "replace_all": False})]),
    Case("unicode", call("Write", file_path="docs/日本語.md", content="🐸 ça marche"),
         [("Write", {"file_path": "docs/日本語.md", "content": "🐸 ça marche"})]),
    Case("< and > inside a value", call("Bash", command="test 1 < 2 && echo '<b>'"),
         [("Bash", {"command": "test 1 < 2 && echo '<b>'"})]),
    Case("missing </parameter> before the next parameter",
         "<tool_call>\n<function=Read>\n<parameter=file_path>\na.py\n<parameter=limit>\n5\n"
         "</parameter>\n</function>\n</tool_call>", [("Read", {"file_path": "a.py", "limit": 5})]),
    Case("cut off inside a value",
         "<tool_call>\n<function=Bash>\n<parameter=command>\nls -la\n</parameter>\n"
         "<parameter=description>\nlist", [("Bash", {"command": "ls -la", "description": "list"})]),
    Case("closing tags missing", "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n"
         "</parameter>\n", [("Bash", {"command": "ls"})]),
    Case("<function=…> without <tool_call>",
         "<function=Read>\n<parameter=file_path>\na.py\n</parameter>\n</function>",
         [("Read", {"file_path": "a.py"})]),
    Case("literal </parameter> in Write content",
         call("Write", file_path="p.py", content='END = "</parameter>"\nx = 1'),
         [("Write", {"file_path": "p.py", "content": 'END = "'})],
         ours=[("Write", {"file_path": "p.py", "content": 'END = "</parameter>"\nx = 1'})],
         why="vLLM 0.20 ends a value at the first </parameter>: the file would be cut"),
    Case("literal </function> in a command", call("Bash", command='echo "</function>"'),
         [("Bash", {"command": 'echo "'})], ours=[("Bash", {"command": 'echo "</function>"'})],
         why="vLLM 0.20 ends the call at the first </function>"),
    Case("a whole call inside Write content",
         call("Write", file_path="t.md", content="Example:\n" + read("x.py") + "\nend"),
         [("Write", {"file_path": "x.py", "content": "Example:\n<tool_call>\n<function=Read>"})],
         ours=[("Write", {"file_path": "t.md",
                          "content": "Example:\n" + read("x.py") + "\nend"})],
         why="vLLM 0.20 reads the example's parameters as the Write's own"),
    Case("repeated parameter name",
         "<tool_call>\n<function=Bash>\n<parameter=command>\na\n</parameter>\n"
         "<parameter=command>\nb\n</parameter>\n</function>\n</tool_call>",
         [("Bash", {"command": "b"})],
         ours=[("Bash", {"command": "a\n</parameter>\n<parameter=command>\nb"})],
         why="a name already being read can only be text inside the value (a parser's own "
             "source, written with Write); vLLM keeps the last one"),
    Case("Hermes JSON call", '<tool_call>\n{"name": "Glob", "arguments": {"pattern": "*.md"}}\n'
         "</tool_call>", [], ours=[("Glob", {"pattern": "*.md"})],
         why="other Qwen models' format; taken only when it is complete, valid JSON"),
    Case("empty function name", "<tool_call>\n<function=>\n<parameter=a>\n1\n</parameter>\n"
         "</function>\n</tool_call>", [("", {"a": "1"})], ours=[("", {})],
         why="reported as a parse error; the tool result is the same `Unknown tool: `"),
]


def ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"call_{next(counter)}"


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_parser_matches_vllm(case: Case) -> None:
    assert (case.ours is None) == (not case.why), "a deliberate difference needs its reason"
    expected = case.vllm if case.ours is None else case.ours
    parsed = parse_assistant_text("plan\n</think>\n\n" + case.text, TOOLS, ids())
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == expected
    assert parsed.reasoning == "plan"


def test_issue_cases_keep_the_prose_as_content() -> None:
    between = parse_assistant_text(read("a.py") + "\nand also\n" + read("b.py"), TOOLS, ids(),
                                   thinking=False)
    assert between.content == "and also"
    prose = parse_assistant_text("I'll use a <tool_call> to read it.\n" + read("a.py"), TOOLS,
                                 ids(), thinking=False)
    assert prose.content == "I'll use a <tool_call> to read it."
    assert prose.errors == []


def test_hostile_text_full_of_tags_parses_quickly() -> None:
    import time

    chunk = "x\n</parameter>\n<parameter=p{}>\ny\n</parameter>\n</function>\n</tool_call>\nz\n"
    content = "".join(chunk.format(i) for i in range(300))
    started = time.perf_counter()
    parsed = parse_assistant_text("r</think>" + call("Write", file_path="f", content=content),
                                  TOOLS, ids())
    assert time.perf_counter() - started < 5.0
    assert parsed.tool_calls[0].name == "Write"
