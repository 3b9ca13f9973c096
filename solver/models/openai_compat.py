"""Client for OpenAI-compatible chat servers: llama-server, SGLang, vLLM.

Every sampling parameter is sent explicitly (docs/LEAF_CONTRACT.md §4), under each
server's name for it, because server defaults differ from the evaluation config.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx

from solver.models.base import (
    ContextOverflow,
    FinishReason,
    ModelQueryError,
    Sampling,
    ToolCall,
    Turn,
    TurnBudget,
    TurnCutOff,
    Usage,
)
from solver.models.qwen3coder import new_call_id, parse_assistant_text
from solver.retry import Backoff, Transient, with_backoff

_T = TypeVar("_T")

# How llama-server, vLLM and SGLang word "the prompt does not fit".
_CONTEXT_OVERFLOW = re.compile(
    r"context (length|size|window)|exceed_context_size|maximum context|context_length_exceeded"
    r"|prompt is too long|too many tokens",
    re.IGNORECASE,
)
_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "eos": "stop",
    "end_turn": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "max_tokens": "length",
}
_EXCERPT_CHARS = 300


class OpenAICompatClient:
    """One assistant turn per POST to `{base}/v1/chat/completions`."""

    def __init__(self, base_url: str, model: str = "frognano", api_key: str | None = None,
                 sampling: Sampling | None = None, timeout: float = 600.0, retries: int = 3,
                 backoff: float = 1.0) -> None:
        self.url = chat_completions_url(base_url)
        self.model = model
        self.name = f"openai-compat:{model}"
        self.sampling = sampling or Sampling()
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._api_key = api_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(headers=headers)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpenAICompatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request_body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                     budget: TurnBudget) -> dict[str, Any]:
        s = self.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": budget.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k,
            "min_p": s.min_p,
            "repetition_penalty": s.repetition_penalty,  # vLLM, SGLang
            "repeat_penalty": s.repetition_penalty,  # llama-server
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "chat_template_kwargs": {"enable_thinking": s.enable_thinking},
            "stream": False,
        }
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        if s.seed is not None:
            body["seed"] = s.seed
        return body

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 budget: TurnBudget) -> Turn:
        body = self.request_body(messages, tools, budget)
        started = time.monotonic()
        timeout = min(self.timeout, budget.timeout)
        if budget.on_tokens is None:
            data = self._post_with_retries(body, timeout)
            return self._turn_from_response(data, tools, time.monotonic() - started)
        # Someone watches the turn: stream it, reporting tokens as they come, and keep
        # what came if the turn's time runs out (TurnCutOff), as the GGUF backend does.
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        stream = _Stream(budget.on_tokens)
        cut_off = self._stream_with_retries(body, timeout, stream, started)
        turn = self._turn_from_response(stream.data(cut_off), tools, time.monotonic() - started)
        if cut_off:
            raise TurnCutOff(f"generation timed out after {timeout:g}s "
                             f"({stream.tokens} tokens)", partial=turn)
        return turn

    def _stream_with_retries(self, body: dict[str, Any], timeout: float, stream: _Stream,
                             started: float) -> bool:
        """Read the server's event stream into `stream`; whether the time ran out. Retried
        like a plain request only until the first token: then the turn is under way."""

        def try_once(_: int) -> bool:
            try:
                with self._http.stream("POST", self.url, json=body, timeout=timeout) as response:
                    if response.status_code >= 400:
                        response.read()
                        if response.status_code < 500:
                            self._decode(response)  # raises with the server's message
                        raise self._server_error(response)
                    return self._read_stream(response, stream, started + timeout)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                failure = self._transport_failure(exc, timeout)
            if stream.tokens:
                raise self._gave_up(failure) from None
            raise failure from None

        return self._retrying(try_once)

    def _read_stream(self, response: httpx.Response, stream: _Stream, deadline: float) -> bool:
        """An answered stream into `stream`; whether the time ran out. A server that
        ignored `stream` answers whole (its JSON is the turn); anything else that is not
        an event stream (an HTML page) is an error, never an empty turn."""
        if "text/event-stream" not in response.headers.get("content-type", ""):
            response.read()
            stream.whole = self._decode(response)
            return False
        cut_off = stream.read(response.iter_lines(), deadline)
        if not stream.chunks:
            raise ModelQueryError(f"model server at {self.url} sent no events in its "
                                  "event stream")
        return cut_off

    # --- transport ---------------------------------------------------------------------------

    def _post_with_retries(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        def try_once(_: int) -> dict[str, Any]:
            try:
                response = self._http.post(self.url, json=body, timeout=timeout)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                raise self._transport_failure(exc, timeout) from None
            if response.status_code >= 500:
                raise self._server_error(response)
            return self._decode(response)

        return self._retrying(try_once)

    def _retrying(self, try_once: Callable[[int], _T]) -> _T:
        """`try_once` under this client's policy (solver/retry.py): `retries` more tries
        after the first, `backoff` seconds before the second, doubling."""
        policy = Backoff(tries=self.retries + 1, first_wait=self.backoff,
                         retry_on=(Transient,))
        try:
            return with_backoff(try_once, policy, what=f"model server at {self.url}")
        except Transient as last:
            raise self._gave_up(last) from None

    def _gave_up(self, last: Transient) -> ModelQueryError:
        return ModelQueryError(f"model server at {self.url} failed after {self.retries + 1} "
                               f"tries: {last.reason}")

    def _transport_failure(self, exc: httpx.HTTPError, timeout: float) -> Transient:
        """A request that got no answer: worth another try."""
        if isinstance(exc, httpx.TimeoutException):
            return Transient(f"timed out after {timeout:g}s")
        return Transient(f"{type(exc).__name__}: {self._redact(str(exc))}")

    def _server_error(self, response: httpx.Response) -> Exception:
        """A 5xx: worth another try, unless it says the prompt does not fit (it never will)."""
        message = _error_message(response)
        if _CONTEXT_OVERFLOW.search(message):
            return ContextOverflow(self._describe(response.status_code, message))
        return Transient(f"HTTP {response.status_code}: {self._excerpt(message)}",
                         status=response.status_code)

    def _decode(self, response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 400:
            message = _error_message(response)
            if _CONTEXT_OVERFLOW.search(message):
                raise ContextOverflow(self._describe(response.status_code, message))
            raise ModelQueryError(self._describe(response.status_code, message))
        try:
            data = response.json()
        except ValueError:
            raise ModelQueryError(
                f"model server at {self.url} returned non-JSON: "
                f"{self._excerpt(response.text)}") from None
        if isinstance(data, dict) and "error" in data and "choices" not in data:
            message = _error_message(response)  # some servers report errors with HTTP 200
            if _CONTEXT_OVERFLOW.search(message):
                raise ContextOverflow(self._describe(response.status_code, message))
            raise ModelQueryError(self._describe(response.status_code, message))
        if not isinstance(data, dict):
            raise ModelQueryError(
                f"model server at {self.url} returned an unexpected answer: "
                f"{self._excerpt(response.text)}")
        return data

    def _describe(self, status: int, message: str) -> str:
        return f"model server at {self.url} answered HTTP {status}: {self._excerpt(message)}"

    def _excerpt(self, text: str) -> str:
        text = self._redact(text.strip())
        return text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + "…"

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    # --- answer ------------------------------------------------------------------------------

    def _turn_from_response(self, data: dict[str, Any], tools: list[dict[str, Any]],
                            wall_seconds: float) -> Turn:
        try:
            choice = data["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (KeyError, IndexError, TypeError) as exc:
            raise ModelQueryError(
                f"model server at {self.url} returned an answer without choices[0].message "
                f"({exc!r}): {self._excerpt(json.dumps(data, ensure_ascii=False))}") from None

        content = message.get("content") or ""
        reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
        tool_calls = [_tool_call(raw) for raw in message.get("tool_calls") or []]
        errors: list[str] = []
        if not tool_calls and any(tag in content for tag in ("</think>", "<tool_call>",
                                                              "<function=")):
            # The server runs without a reasoning or tool-call parser: do its job.
            parsed = parse_assistant_text(content, tools, new_call_id,
                                          thinking="</think>" in content)
            content, tool_calls, errors = parsed.content, parsed.tool_calls, parsed.errors
            reasoning = "\n\n".join(part for part in (reasoning, parsed.reasoning) if part)

        finish_reason = _FINISH_REASONS.get(str(choice.get("finish_reason")), "stop")
        if tool_calls and finish_reason == "stop":
            finish_reason = "tool_calls"
        elif not tool_calls and finish_reason == "tool_calls":
            finish_reason = "stop"
        return Turn(
            content=content.strip(),
            reasoning=reasoning.strip(),
            tool_calls=tool_calls,
            usage=_usage(data, wall_seconds),
            finish_reason=finish_reason,
            errors=errors,
        )


class _Stream:
    """A streamed answer put back together as the non-streamed one (`choices[0].message`,
    `usage`, llama-server's `timings`), counting its tokens as they come (a chunk a token,
    as llama-server, vLLM and SGLang send them)."""

    def __init__(self, on_tokens: Callable[[int], None]) -> None:
        self.on_tokens = on_tokens
        self.tokens = 0
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.extra: dict[str, Any] = {}  # usage, timings
        self.chunks = 0  # events read, [DONE] included
        self.whole: dict[str, Any] | None = None  # the answer of a server that did not stream

    def read(self, lines: Iterator[str], deadline: float) -> bool:
        """Consume the event stream; True when `deadline` passed before it ended."""
        for line in lines:
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            self.chunks += 1
            if payload == "[DONE]":
                return False
            try:
                chunk = json.loads(payload)
            except ValueError:
                continue
            if isinstance(chunk, dict):
                self._take(chunk)
            if time.monotonic() > deadline:
                return True
        return False

    def _take(self, chunk: dict[str, Any]) -> None:
        for key in ("usage", "timings"):
            if isinstance(chunk.get(key), dict):
                self.extra[key] = chunk[key]
        choices = chunk.get("choices") or []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        delta = choice.get("delta") or {}
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        if not isinstance(delta, dict):
            return
        self.content.append(delta.get("content") or "")
        self.reasoning.append(delta.get("reasoning_content") or delta.get("reasoning") or "")
        for raw in delta.get("tool_calls") or []:
            call = self.calls.setdefault(int(raw.get("index") or 0),
                                         {"id": None, "function": {"name": "", "arguments": ""}})
            call["id"] = raw.get("id") or call["id"]
            function = raw.get("function") or {}
            call["function"]["name"] += function.get("name") or ""
            call["function"]["arguments"] += function.get("arguments") or ""
        if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") \
                or delta.get("tool_calls"):
            self.tokens += 1
            self.on_tokens(self.tokens)

    def data(self, cut_off: bool) -> dict[str, Any]:
        """The answer as a non-streamed response would have carried it."""
        if self.whole is not None:
            return self.whole
        message: dict[str, Any] = {"content": "".join(self.content),
                                   "reasoning_content": "".join(self.reasoning)}
        if self.calls and not cut_off:  # a call the time cut off is never run
            message["tool_calls"] = [self.calls[k] for k in sorted(self.calls)]
        usage = self.extra.get("usage") or {"completion_tokens": self.tokens}
        return {"choices": [{"message": message,
                             "finish_reason": "length" if cut_off else self.finish_reason}],
                **self.extra, "usage": usage}


def chat_completions_url(base_url: str) -> str:
    """Accept `http://host:port`, `…/v1` and the full endpoint alike."""
    base = base_url.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/chat/completions"


def _tool_call(raw: dict[str, Any]) -> ToolCall:
    function = raw.get("function") or {}
    arguments = function.get("arguments")
    raw_text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            arguments = None
    return ToolCall(
        id=str(raw.get("id") or new_call_id()),
        name=str(function.get("name") or ""),
        # Leaf treats arguments that are not a JSON object as {} (docs/LEAF_CONTRACT.md §3).
        arguments=arguments if isinstance(arguments, dict) else {},
        raw_arguments=raw_text,
    )


def _usage(data: dict[str, Any], wall_seconds: float) -> Usage:
    reported = data.get("usage")
    usage: dict[str, Any] = reported if isinstance(reported, dict) else {}
    prompt = int(usage.get("prompt_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    result = Usage(prompt_tokens=prompt, prompt_tokens_evaluated=max(0, prompt - cached),
                   completion_tokens=int(usage.get("completion_tokens") or 0))
    timings = data.get("timings")
    if isinstance(timings, dict) and "prompt_n" in timings:
        # llama-server reports what it really evaluated (cached tokens excluded).
        result.prompt_tokens_evaluated = int(timings.get("prompt_n") or 0)
        if not result.prompt_tokens:
            result.prompt_tokens = result.prompt_tokens_evaluated + int(timings.get("cache_n") or 0)
        if not result.completion_tokens:
            result.completion_tokens = int(timings.get("predicted_n") or 0)
        result.prompt_seconds = float(timings.get("prompt_ms") or 0.0) / 1000
        result.completion_seconds = float(timings.get("predicted_ms") or 0.0) / 1000
    else:
        # No split available: the whole round trip counts as generation time.
        result.completion_seconds = wall_seconds
    return result


def _error_message(response: httpx.Response) -> str:
    """The error text of llama-server ({"error": {"message"}}), vLLM/SGLang ({"message"})."""
    try:
        data = response.json()
    except ValueError:
        return response.text
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return f"{error.get('type') or ''} {error['message']}".strip()
        if isinstance(error, str):
            return error
        if data.get("message"):
            return str(data["message"])
    return response.text
