"""Parser of Qwen3-Coder assistant text (docs/LEAF_CONTRACT.md §5), and its inverse.

The input is what the model generates after the generation prompt
`<|im_start|>assistant\\n<think>\\n`: reasoning, `</think>`, then content with
zero or more XML tool calls::

    <tool_call>
    <function=NAME>
    <parameter=P>
    VALUE
    </parameter>
    </function>
    </tool_call>

The behavioural reference is vLLM's `qwen3_coder` tool parser (0.20, the last
release where it is plain Python), which served FrogNano in Microsoft's
evaluation; tests/unit/solver/agent/test_fidelity.py holds the case table. Where this parser
deliberately differs, the code says so; in short: it keeps file contents that
contain these tags intact, where vLLM cuts them at the first `</parameter>`.

What starts a call: `<tool_call>` followed (after optional whitespace) by
`<function=`, a bare `<function=NAME>` at the start of a line, or a
`<tool_call>` holding a complete Hermes-style JSON call. A `<tool_call>`
mentioned in prose starts nothing and stays content.

Where a value ends: at a `</parameter>` followed by the start of another
parameter of this call, or by the end of the call (`</function>`,
`</tool_call>`, the end of the text, a real next call). Two cases need
evidence, because file contents produce them too:

- `</parameter>` then `<parameter=NAME>` with NAME not in the tool's schema
  (Leaf honours Bash's `timeout_ms`): a boundary only if NAME's own value then
  ends cleanly;
- `</tool_call>` then prose: a boundary only if the prose is tag-free and a
  clean call follows it, or if no better end exists (text after the last call).

"Clean" means the value ended at the first plausible end after it. Known
limitation: a value that itself contains a complete, clean ending (e.g.
`</parameter>\\n<parameter=new_string>` inside an Edit's old_string) is cut there.
"""

from __future__ import annotations

import ast
import bisect
import json
import math
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from solver.models.base import ToolCall

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
FUNCTION_START = "<function="
FUNCTION_END = "</function>"
PARAM_START = "<parameter="
PARAM_END = "</parameter>"
# Backends that stop on these normally strip them; be tolerant when they don't.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>")

_CANDIDATES = re.compile(r"</parameter>|\n<parameter=|\n</function>|\n</tool_call>")
_MAYBE_CALL = re.compile(r"<tool_call>|(?:^|(?<=\n))[ \t]*<function=")
_TAGS_IN_PROSE = (PARAM_START, PARAM_END, FUNCTION_START, FUNCTION_END, TOOL_CALL_END)
_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_NAME_GUESS = re.compile(r"<function\s*=?\s*([A-Za-z_][\w.\-]*)|\"name\"\s*:\s*\"([^\"]+)\"")
# How deep the look-ahead behind an undeclared parameter may go (a chain of them);
# real calls need one level.
_MAX_DEPTH = 16
_LOOKAHEAD_BUDGET = 20_000


@dataclass
class ParsedAssistant:
    """One generated assistant text, split into its parts."""

    content: str
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def parse_assistant_text(text: str, tools: list[dict[str, Any]] | None,
                         new_id: Callable[[], str] = new_call_id, *,
                         thinking: bool = True) -> ParsedAssistant:
    """Split generated text into reasoning, content and tool calls.

    `thinking` says the text started inside the reasoning (the generation prompt
    ended with `<think>\\n`). Without any `</think>` the text is then reasoning
    up to the first tool call, and content stays empty: a model that ran out of
    tokens while thinking has not answered yet. With `thinking=False` (thinking
    disabled, or content already separated by a server) such text is content.
    """
    text = _strip_end_tokens(text)
    reasoning, body = _split_reasoning(text, thinking)
    parser = _Parser(body, _schemas_by_name(tools or []))
    parser.prime()
    parsed = ParsedAssistant(content="", reasoning=reasoning)
    content_parts: list[str] = []
    pos = 0
    while (start := parser.next_call(pos)) is not None:
        content_parts.append(body[pos:start])
        result = parser.call_at(start)
        parsed.tool_calls.append(ToolCall(id=new_id(), name=result.name,
                                          arguments=result.arguments, raw_arguments=result.raw))
        if result.error:
            parsed.errors.append(f"tool call {len(parsed.tool_calls)}: {result.error}")
        pos = result.end
    content_parts.append(body[pos:])
    parsed.content = "".join(content_parts).strip()
    return parsed


def format_tool_call(name: str, args: dict[str, Any]) -> str:
    """The canonical XML text of one call, serialised like the chat template does
    (objects and arrays as JSON, everything else with `str`, so booleans are `True`)."""
    lines = [TOOL_CALL_START, f"{FUNCTION_START}{name}>"]
    for key, value in args.items():
        rendered = (json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list)
                    else str(value))
        lines += [f"{PARAM_START}{key}>", rendered, PARAM_END]
    lines += [FUNCTION_END, TOOL_CALL_END]
    return "\n".join(lines)


def format_assistant_text(reasoning: str, calls: Sequence[tuple[str, dict[str, Any]]] = (),
                          content: str = "") -> str:
    """A whole generated turn as the model writes it after `<think>\\n`."""
    parts = [content] if content else []
    parts += [format_tool_call(name, args) for name, args in calls]
    return f"{reasoning}\n{THINK_END}\n\n" + "\n".join(parts)


# --- reasoning -----------------------------------------------------------------------------


def _strip_end_tokens(text: str) -> str:
    stripped = text.rstrip()
    for token in END_OF_TURN_TOKENS:
        if stripped.endswith(token):
            return stripped[: -len(token)]
    return text


def _split_reasoning(text: str, thinking: bool) -> tuple[str, str]:
    leading = text.lstrip()
    if leading.startswith(THINK_START):
        text, thinking = leading[len(THINK_START):], True
    end = text.find(THINK_END)
    if end >= 0:
        return text[:end].strip(), text[end + len(THINK_END):]
    if not thinking:
        return "", text
    first_call = _Parser(text, {}).next_call(0)
    if first_call is None:
        return text.strip(), ""
    return text[:first_call].strip(), text[first_call:]


# --- calls ---------------------------------------------------------------------------------


class _Boundary(IntEnum):
    NONE = 0
    WEAK = 1  # plausible end, used only when nothing better exists
    STRONG = 2


@dataclass
class _CallState:
    properties: dict[str, Any] | None  # None: unknown tool, any parameter name goes
    given: dict[str, str] = field(default_factory=dict)


@dataclass
class _ValueEnd:
    end: int  # where the value's text ends
    resume: int  # where parsing goes on
    clean: bool  # ended at the first plausible end after it


@dataclass
class _CallResult:
    name: str
    arguments: dict[str, Any]
    raw: str
    error: str | None
    end: int
    clean: bool


class _Parser:
    """Calls in one body of text; a call's parse is kept, as look-ahead parses it too."""

    def __init__(self, body: str, schemas: dict[str, dict[str, Any]]) -> None:
        self.body = body
        self.schemas = schemas
        self._calls: dict[int, _CallResult] = {}
        self._starts: list[int] | None = None  # every call start, once primed
        # Look-ahead steps left: hostile text full of tags must not make parsing slow;
        # once spent, ambiguous boundaries are simply not taken.
        self._budget = _LOOKAHEAD_BUDGET

    # --- where calls start -----------------------------------------------------------------

    def next_call(self, pos: int) -> int | None:
        if self._starts is not None:
            at = bisect.bisect_left(self._starts, pos)
            return self._starts[at] if at < len(self._starts) else None
        for match in _MAYBE_CALL.finditer(self.body, pos):
            start = match.start() if match.group() == TOOL_CALL_START else match.end() - 10
            if self.starts_call(start):
                return start
        return None

    def starts_call(self, pos: int) -> bool:
        body = self.body
        if body.startswith(FUNCTION_START, pos):  # without <tool_call>: only NAME> counts
            name, after = _read_tag_name(body, pos + len(FUNCTION_START))
            return bool(_NAME.fullmatch(name)) and body.startswith(">", after - 1)
        if not body.startswith(TOOL_CALL_START, pos):
            return False
        inner = _skip_ws(body, pos + len(TOOL_CALL_START))
        if body.startswith(FUNCTION_START, inner):
            return True  # a real call, even if malformed after this: it gets an error
        # Deliberate difference: vLLM's qwen3_coder ignores Hermes JSON calls (other
        # Qwen models' format); they are taken here when complete and valid.
        return body.startswith("{", inner) and _hermes_call(self._block(inner)[0]) is not None

    def _block(self, inner: int) -> tuple[str, int]:
        """The text of a `<tool_call>` block from `inner`, and the offset after it."""
        end_tag = self.body.find(TOOL_CALL_END, inner)
        next_tag = self.body.find(TOOL_CALL_START, inner)
        inner_end = min([p for p in (end_tag, next_tag) if p >= 0] or [len(self.body)])
        after = inner_end + len(TOOL_CALL_END) if inner_end == end_tag else inner_end
        return self.body[inner:inner_end], after

    # --- one call --------------------------------------------------------------------------

    def prime(self) -> None:
        """Parse every possible call, last first: the look-ahead behind a call then finds
        the later calls already parsed, however many calls a turn strings together."""
        starts: list[int] = []
        pos = 0
        while (start := self.next_call(pos)) is not None:
            starts.append(start)
            pos = start + 1
        self._starts = starts
        for start in reversed(starts):
            self.call_at(start)

    def call_at(self, start: int) -> _CallResult:
        result = self._calls.get(start)
        if result is None:
            result = self._calls[start] = self._parse_call(start)
        return result

    def _parse_call(self, start: int) -> _CallResult:
        body = self.body
        cursor = start
        if body.startswith(TOOL_CALL_START, cursor):
            cursor = _skip_ws(body, cursor + len(TOOL_CALL_START))
        if not body.startswith(FUNCTION_START, cursor):
            return self._parse_hermes(start, cursor)
        name, cursor = _read_tag_name(body, cursor + len(FUNCTION_START))
        if not _NAME.fullmatch(name):
            end = self._skip_past_block(cursor)
            what = "no function name" if not name else f"invalid function name {name!r}"
            return _CallResult(name, {}, body[start:end], f"{what} in {_excerpt(body[start:end])}",
                               end, clean=False)

        properties = self.schemas[name].get("properties") if name in self.schemas else None
        state = _CallState(properties=properties if isinstance(properties, dict) else None)
        if name in self.schemas and state.properties is None:
            state.properties = {}
        error: str | None = None
        clean = True
        while True:
            cursor = _skip_ws(body, cursor)
            if cursor >= len(body) or self.starts_call(cursor):
                break  # closing tags missing: cut off, or the next call begins
            if body.startswith(PARAM_START, cursor):
                pname, value_start = _read_tag_name(body, cursor + len(PARAM_START))
                if not pname:
                    error = f"parameter without a name in {_excerpt(body[cursor:])}"
                    cursor = self._skip_past_block(cursor)
                    break
                value = self._value_end(value_start, pname, state, 0)
                state.given[pname] = _strip_one_newline(body[value_start:value.end])
                clean = clean and value.clean
                cursor = value.resume
            elif body.startswith(FUNCTION_END, cursor):
                cursor = _skip_ws(body, cursor + len(FUNCTION_END))
                if body.startswith(TOOL_CALL_END, cursor):
                    cursor += len(TOOL_CALL_END)
                break
            elif body.startswith(TOOL_CALL_END, cursor):
                cursor += len(TOOL_CALL_END)
                break
            else:
                error = f"unexpected text in call to {name}: {_excerpt(body[cursor:])}"
                cursor = self._skip_past_block(cursor)
                break

        raw = body[start:cursor]
        if error:
            return _CallResult(name, {}, raw, error, cursor, clean=False)
        arguments = {key: convert_value(value, key, properties)
                     for key, value in state.given.items()}
        return _CallResult(name, arguments, raw, None, cursor, clean)

    def _parse_hermes(self, start: int, inner: int) -> _CallResult:
        text, end = self._block(inner)
        call = _hermes_call(text)
        if call is not None:
            return _CallResult(call[0], call[1], text.strip(), None, end, clean=True)
        guess = _NAME_GUESS.search(text)
        name = (guess.group(1) or guess.group(2)) if guess else ""
        error = f"malformed tool call (expected <function=NAME>): {_excerpt(text)}"
        return _CallResult(name, {}, self.body[start:end], error, end, clean=False)

    def _skip_past_block(self, pos: int) -> int:
        end_tag = self.body.find(TOOL_CALL_END, pos)
        next_call = self.next_call(pos)
        if end_tag >= 0 and (next_call is None or end_tag < next_call):
            return end_tag + len(TOOL_CALL_END)
        return next_call if next_call is not None else len(self.body)

    # --- where a value ends ----------------------------------------------------------------

    def _value_end(self, start: int, current: str, state: _CallState, depth: int) -> _ValueEnd:
        body = self.body
        weak: list[tuple[int, int]] = []
        bare_close: int | None = None  # `</function>` or `</tool_call>` with `</parameter>` missing
        for match in _CANDIDATES.finditer(body, start):
            if depth:
                self._budget -= 1
                if self._budget < 0:
                    return _ValueEnd(len(body), len(body), clean=False)
            token = match.group()
            if token == PARAM_END:
                strength = self._boundary_after(match.end(), current, state, depth)
                if strength is _Boundary.STRONG:
                    return _ValueEnd(match.start(), match.end(), clean=not weak)
                if strength is _Boundary.WEAK:
                    weak.append((match.start(), match.end()))
            elif token == "\n" + PARAM_START:
                tag = match.start() + 1
                if self._is_declared_new(tag, current, state):
                    return _ValueEnd(tag, tag, clean=not weak)
            elif bare_close is None:
                tag = match.start() + 1
                if self._boundary_after(tag, current, state, depth) is _Boundary.STRONG:
                    bare_close = tag
        if bare_close is not None:
            return _ValueEnd(bare_close, bare_close, clean=False)
        if weak:  # the last one: earlier ones are more likely to be inside the value
            return _ValueEnd(weak[-1][0], weak[-1][1], clean=len(weak) == 1)
        return _ValueEnd(len(body), len(body), clean=True)

    def _boundary_after(self, pos: int, current: str, state: _CallState,
                        depth: int) -> _Boundary:
        """How convincingly the text at `pos` continues after the end of a value."""
        body = self.body
        pos = _skip_ws(body, pos)
        if pos >= len(body):
            return _Boundary.STRONG
        if body.startswith(PARAM_START, pos):
            return self._parameter_follows(pos, current, state, depth)
        closed = False
        if body.startswith(FUNCTION_END, pos):
            pos, closed = _skip_ws(body, pos + len(FUNCTION_END)), True
        if body.startswith(TOOL_CALL_END, pos):
            pos, closed = _skip_ws(body, pos + len(TOOL_CALL_END)), True
        if not closed:
            return _Boundary.NONE
        if pos >= len(body) or self.starts_call(pos):
            return _Boundary.STRONG
        return _Boundary.STRONG if self._prose_then_call(pos) else _Boundary.WEAK

    def _parameter_follows(self, tag: int, current: str, state: _CallState,
                           depth: int) -> _Boundary:
        name, value_start = _read_tag_name(self.body, tag + len(PARAM_START))
        if not name or name == current or name in state.given:
            return _Boundary.NONE  # a repeated name can only be text inside the value
        if state.properties is None or name in state.properties:
            return _Boundary.STRONG
        if depth >= _MAX_DEPTH or self._budget <= 0 or not _NAME.fullmatch(name):
            return _Boundary.NONE
        after = _CallState(state.properties, {**state.given, current: ""})
        value = self._value_end(value_start, name, after, depth + 1)
        return _Boundary.STRONG if value.clean else _Boundary.NONE

    def _is_declared_new(self, tag: int, current: str, state: _CallState) -> bool:
        """`<parameter=NAME>` right after a value whose `</parameter>` is missing."""
        name, _ = _read_tag_name(self.body, tag + len(PARAM_START))
        if not name or name == current or name in state.given:
            return False
        return state.properties is None or name in state.properties

    def _prose_then_call(self, pos: int) -> bool:
        """Text between two calls: tag-free prose, then a call that parses cleanly."""
        start = self.next_call(pos)
        if start is None or any(tag in self.body[pos:start] for tag in _TAGS_IN_PROSE):
            return False
        return self.call_at(start).clean


# --- small helpers -------------------------------------------------------------------------


def _hermes_call(text: str) -> tuple[str, dict[str, Any]] | None:
    try:
        data = json.loads(text.strip())
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    return (data["name"], arguments) if isinstance(arguments, dict) else None


def _read_tag_name(body: str, pos: int) -> tuple[str, int]:
    """Read `NAME>` at pos; tolerate a missing `>` by ending the name at the line end."""
    gt = body.find(">", pos)
    newline = body.find("\n", pos)
    if gt >= 0 and (newline < 0 or gt < newline):
        return body[pos:gt].strip(), gt + 1
    end = newline if newline >= 0 else len(body)
    return body[pos:end].strip(), end


def _skip_ws(body: str, pos: int) -> int:
    while pos < len(body) and body[pos].isspace():
        pos += 1
    return pos


def _strip_one_newline(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _excerpt(text: str, limit: int = 120) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _schemas_by_name(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    schemas: dict[str, dict[str, Any]] = {}
    for tool in tools:
        function = tool.get("function", tool)
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            schemas[function["name"]] = parameters if isinstance(parameters, dict) else {}
    return schemas


# --- values --------------------------------------------------------------------------------

_STRING_TYPES = ("string", "str", "text", "varchar", "char", "enum")
_INTEGER_PREFIXES = ("int", "uint", "long", "short", "unsigned")
_FAILED = object()


def convert_value(value: str, name: str, properties: dict[str, Any] | None) -> Any:
    """Convert a parameter's text by its JSON-schema type, as vLLM's qwen3_coder does.

    A parameter the schema does not declare, and any string type, keep the text
    (the literal `null` included: vLLM's newer releases agree). For other types
    `null`/`None` is None; a value that does not convert stays a string, which the
    tool then rejects as Leaf's would (`"12.0"` is no integer).
    """
    prop = (properties or {}).get(name)
    if prop is None:
        return value
    declared = prop.get("type", "string") if isinstance(prop, dict) else "string"
    if isinstance(declared, list):
        # Deliberate difference: vLLM reads a list of types as one unknown type
        # name; each type is tried in order here. Leaf's schemas have none.
        for typ in declared:
            converted = _convert_one(value, str(typ).strip().lower())
            if converted is not _FAILED:
                return converted
        return value
    converted = _convert_one(value, str(declared).strip().lower())
    return value if converted is _FAILED else converted


def _convert_one(value: str, typ: str) -> Any:
    if typ in _STRING_TYPES:
        return value
    if value.lower() in ("null", "none"):
        return None
    if typ.startswith(_INTEGER_PREFIXES):
        try:
            return int(value)
        except ValueError:
            return _FAILED
    if typ.startswith(("num", "float")):
        try:
            number = float(value)
        except ValueError:
            return _FAILED
        # Deliberate difference: vLLM's int(inf) raises OverflowError, which drops
        # every call of the turn; a non-finite number stays a string here.
        if not math.isfinite(number):
            return _FAILED
        return int(number) if number.is_integer() else number
    if typ in ("boolean", "bool", "binary"):
        return value.lower() == "true"  # vLLM: anything else, "yes" included, is false
    if typ in ("object", "array", "arr") or typ.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except ValueError:
            pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _FAILED
