"""Rendering a GGUF's embedded chat template the way HF transformers does.

The model was trained on prompts rendered by transformers' `apply_chat_template`,
so the same Jinja semantics are reproduced here: a sandboxed, immutable
environment with `trim_blocks` and `lstrip_blocks`, the `loopcontrols` extension,
a `tojson` that keeps key order and does not HTML-escape, and the
`raise_exception` / `strftime_now` globals.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """The template rejected the conversation (`raise_exception`) or is broken."""


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # jinja2's builtin tojson sorts keys and escapes '<', '>' and '&', which would
    # change the tool list the model was trained on.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=8)
def _compile(template: str) -> Any:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except TemplateError as exc:
        raise ChatTemplateError(f"the chat template does not compile: {exc}") from None


def render_chat_template(template: str, messages: Sequence[Mapping[str, Any]],
                         tools: Iterable[Mapping[str, Any]] | None = None, *,
                         add_generation_prompt: bool = True, bos_token: str = "",
                         eos_token: str = "", **kwargs: Any) -> str:
    """Render `template` with transformers' variables; extra `kwargs` (such as
    `enable_thinking=False`) become template variables, as in `apply_chat_template`."""
    compiled = _compile(template)
    try:
        return compiled.render(
            messages=list(messages),
            tools=list(tools) if tools is not None else None,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            **kwargs,
        )
    except ChatTemplateError:
        raise
    except TemplateError as exc:
        raise ChatTemplateError(f"the chat template failed: {exc}") from None


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A deep copy in which tool-call arguments are mappings.

    The OpenAI shape carries arguments as a JSON string, while Qwen-family
    templates iterate them as a mapping (`arguments | items`); servers such as
    vLLM and llama-server decode them before rendering, and so do we. Arguments
    that are not a JSON object are left as they are, for the template to judge.
    """
    result = copy.deepcopy([dict(message) for message in messages])
    for message in result:
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
                continue
            try:
                decoded = json.loads(function["arguments"])
            except ValueError:
                continue
            if isinstance(decoded, dict):
                function["arguments"] = decoded
    return result
