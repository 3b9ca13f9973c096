"""Parser of Qwen3-Coder assistant text (leaf-contract §5), and its inverse.

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

Boundaries are chosen so that file contents which themselves contain these tags
(a parser's source, its tests, XML) survive: a parameter ends only at a
`</parameter>` that is followed by the start of a parameter of this tool not yet
given, or by the end of the call (`</function>`, `</tool_call>`, a well-formed
next call or the end of the text). Known limitation: a value that literally contains such a
complete, well-formed ending (e.g. `</parameter>\\n<parameter=new_string>` inside
an Edit's old_string) is still cut there.
"""

from __future__ import annotations

import ast
import json
import math
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from workers.models.base import ToolCall

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
_CALL_START = re.compile(r"<tool_call>|<function=")
_NAME_GUESS = re.compile(r"<function\s*=?\s*([A-Za-z_][\w.\-]*)|\"name\"\s*:\s*\"([^\"]+)\"")


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
    schemas = _schemas_by_name(tools or [])
    parsed = ParsedAssistant(content="", reasoning=reasoning)
    content_parts: list[str] = []
    pos = 0
    while (match := _CALL_START.search(body, pos)) is not None:
        content_parts.append(body[pos:match.start()])
        call, error, pos = _parse_call(body, match.start(), schemas, new_id)
        parsed.tool_calls.append(call)
        if error:
            parsed.errors.append(f"tool call {len(parsed.tool_calls)}: {error}")
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
    first_call = _CALL_START.search(text)
    if first_call is None:
        return text.strip(), ""
    return text[: first_call.start()].strip(), text[first_call.start():]


# --- one call ------------------------------------------------------------------------------


class _Boundary(IntEnum):
    NONE = 0
    WEAK = 1  # plausible end, used only when nothing better exists
    STRONG = 2


@dataclass
class _CallState:
    tool: str
    properties: dict[str, Any] | None  # None: unknown tool, any parameter name goes
    given: dict[str, str] = field(default_factory=dict)


def _parse_call(body: str, start: int, schemas: dict[str, dict[str, Any]],
                new_id: Callable[[], str]) -> tuple[ToolCall, str | None, int]:
    """Parse the call at `start`; returns the call, an error or None, and the end offset."""
    cursor = start
    if body.startswith(TOOL_CALL_START, cursor):
        cursor += len(TOOL_CALL_START)
    cursor = _skip_ws(body, cursor)
    if not body.startswith(FUNCTION_START, cursor):
        return _parse_non_xml_call(body, cursor, new_id)
    name, cursor = _read_tag_name(body, cursor + len(FUNCTION_START))
    if not name:
        call, _, end = _parse_non_xml_call(body, cursor, new_id)
        return call, f"no function name in {_excerpt(body[start:end])}", end

    properties = schemas.get(name, {}).get("properties") if name in schemas else None
    state = _CallState(tool=name, properties=properties)
    error: str | None = None
    while True:
        cursor = _skip_ws(body, cursor)
        if cursor >= len(body) or _starts_call(body, cursor):
            break  # closing tags missing: cut off, or the next call begins
        if body.startswith(PARAM_START, cursor):
            pname, value_start = _read_tag_name(body, cursor + len(PARAM_START))
            if not pname:
                error = f"parameter without a name in {_excerpt(body[cursor:])}"
                cursor = _skip_past_block(body, cursor)
                break
            value_end, cursor = _find_value_end(body, value_start, pname, state)
            state.given[pname] = _strip_one_newline(body[value_start:value_end])
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
            cursor = _skip_past_block(body, cursor)
            break

    raw = body[start:cursor]
    if error:
        return ToolCall(id=new_id(), name=name, arguments={}, raw_arguments=raw), error, cursor
    arguments = {key: _convert(value, (properties or {}).get(key))
                 for key, value in state.given.items()}
    return ToolCall(id=new_id(), name=name, arguments=arguments, raw_arguments=raw), None, cursor


def _parse_non_xml_call(body: str, cursor: int,
                        new_id: Callable[[], str]) -> tuple[ToolCall, str | None, int]:
    """A block without `<function=`: Hermes-style JSON (other Qwen models) or garbage."""
    end_tag = body.find(TOOL_CALL_END, cursor)
    next_call = body.find(TOOL_CALL_START, cursor)
    inner_end = min(p for p in (end_tag, next_call, len(body)) if p >= 0)
    end = inner_end + len(TOOL_CALL_END) if inner_end == end_tag else inner_end
    inner = body[cursor:inner_end].strip()
    try:
        data = json.loads(inner)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("name"), str):
        arguments = data.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = None
        if isinstance(arguments, dict):
            return ToolCall(id=new_id(), name=data["name"], arguments=arguments,
                            raw_arguments=inner), None, end
    guess = _NAME_GUESS.search(inner)
    name = (guess.group(1) or guess.group(2)) if guess else ""
    error = f"malformed tool call (expected <function=NAME>): {_excerpt(inner)}"
    return ToolCall(id=new_id(), name=name, arguments={}, raw_arguments=inner), error, end


def _find_value_end(body: str, start: int, current: str, state: _CallState) -> tuple[int, int]:
    """Where the value starting at `start` ends, and where parsing resumes."""
    last_weak: tuple[int, int] | None = None
    bare_close: int | None = None  # a closing tag with its `</parameter>` missing
    for match in _CANDIDATES.finditer(body, start):
        token = match.group()
        if token == PARAM_END:
            after = match.end()
            strength = _boundary_after(body, after, current, state)
            if strength is _Boundary.STRONG:
                return match.start(), after
            if strength is _Boundary.WEAK:
                last_weak = (match.start(), after)
        elif token == "\n" + PARAM_START:
            tag = match.start() + 1
            if _is_new_parameter(body, tag, current, state):
                return tag, tag
        elif bare_close is None:
            tag = match.start() + 1
            if _boundary_after(body, tag, current, state) is _Boundary.STRONG:
                bare_close = tag
    if bare_close is not None:
        return bare_close, bare_close
    if last_weak is not None:
        return last_weak
    return len(body), len(body)


def _boundary_after(body: str, pos: int, current: str, state: _CallState) -> _Boundary:
    """How convincingly the text at `pos` continues after the end of a value."""
    pos = _skip_ws(body, pos)
    if pos >= len(body):
        return _Boundary.STRONG
    if body.startswith(PARAM_START, pos):
        return _Boundary.STRONG if _is_new_parameter(body, pos, current, state) else _Boundary.NONE
    if body.startswith(FUNCTION_END, pos):
        pos = _skip_ws(body, pos + len(FUNCTION_END))
        if pos >= len(body) or _next_call_follows(body, pos):
            return _Boundary.STRONG
        if not body.startswith(TOOL_CALL_END, pos):
            return _Boundary.WEAK
    if body.startswith(TOOL_CALL_END, pos):
        pos = _skip_ws(body, pos + len(TOOL_CALL_END))
        if pos >= len(body) or _next_call_follows(body, pos):
            return _Boundary.STRONG
        return _Boundary.WEAK
    return _Boundary.NONE


def _next_call_follows(body: str, pos: int) -> bool:
    """A real next call, not file text that merely mentions `<tool_call>`."""
    if body.startswith(FUNCTION_START, pos):
        return True
    if not body.startswith(TOOL_CALL_START, pos):
        return False
    inner = _skip_ws(body, pos + len(TOOL_CALL_START))
    return body.startswith(FUNCTION_START, inner) or body.startswith("{", inner)


def _is_new_parameter(body: str, tag: int, current: str, state: _CallState) -> bool:
    name, _ = _read_tag_name(body, tag + len(PARAM_START))
    if not name or name == current or name in state.given:
        return False
    return state.properties is None or name in state.properties


# --- small helpers -------------------------------------------------------------------------


def _read_tag_name(body: str, pos: int) -> tuple[str, int]:
    """Read `NAME>` at pos; tolerate a missing `>` by ending the name at the line end."""
    gt = body.find(">", pos)
    newline = body.find("\n", pos)
    if gt >= 0 and (newline < 0 or gt < newline):
        return body[pos:gt].strip(), gt + 1
    end = newline if newline >= 0 else len(body)
    return body[pos:end].strip(), end


def _skip_past_block(body: str, pos: int) -> int:
    end_tag = body.find(TOOL_CALL_END, pos)
    next_call = body.find(TOOL_CALL_START, pos)
    if end_tag >= 0 and (next_call < 0 or end_tag < next_call):
        return end_tag + len(TOOL_CALL_END)
    return next_call if next_call >= 0 else len(body)


def _starts_call(body: str, pos: int) -> bool:
    return body.startswith(TOOL_CALL_START, pos) or body.startswith(FUNCTION_START, pos)


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
            schemas[function["name"]] = function.get("parameters") or {}
    return schemas


# --- values --------------------------------------------------------------------------------


def _convert(value: str, prop: dict[str, Any] | None) -> Any:
    """Convert by the JSON-schema type; anything that does not parse stays a string."""
    types = (prop or {}).get("type", "string")
    for typ in types if isinstance(types, list) else [types]:
        converted = _CONVERTERS.get(typ, _keep)(value)
        if converted is not _FAILED:
            return converted
    return value


_FAILED = object()


def _keep(value: str) -> Any:
    return value


def _to_integer(value: str) -> Any:
    number = _to_number(value)  # "12.0" is still the integer 12
    return number if isinstance(number, int) else _FAILED


def _to_number(value: str) -> Any:
    text = value.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return _FAILED
    if not math.isfinite(number):
        return _FAILED
    return int(number) if number.is_integer() else number


def _to_boolean(value: str) -> Any:
    text = value.strip().lower()
    return {"true": True, "false": False}.get(text, _FAILED)


def _to_structure(value: str) -> Any:
    text = value.strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return _FAILED
    return parsed if isinstance(parsed, dict | list) else _FAILED


def _to_null(value: str) -> Any:
    return None if value.strip() in ("null", "None") else _FAILED


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "string": _keep,
    "integer": _to_integer,
    "number": _to_number,
    "boolean": _to_boolean,
    "object": _to_structure,
    "array": _to_structure,
    "null": _to_null,
}
