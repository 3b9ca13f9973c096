"""OpenAICompatClient against a real local HTTP server speaking the protocol."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sandbox.schemas import TOOLS
from solver.models.base import ContextOverflow, ModelQueryError, Sampling, TurnBudget
from solver.models.openai_compat import OpenAICompatClient, chat_completions_url
from solver.models.qwen3coder import format_tool_call

MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Fix add()."}]
SECRET = "sk-very-secret-key"


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict → JSON, str → raw text
    delay: float = 0.0


def ok(message: dict[str, Any], finish_reason: str = "stop", **extra: Any) -> Reply:
    body = {"id": "x", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", **message},
                         "finish_reason": finish_reason}], **extra}
    return Reply(200, body)


class FakeServer:
    """Answers queued replies in order; records every request."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                server.requests.append({"path": self.path, "headers": dict(self.headers),
                                        "body": json.loads(self.rfile.read(length))})
                reply = server.replies.pop(0) if server.replies else ok({"content": "hi"})
                time.sleep(reply.delay)
                payload = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload.encode())))
                    self.end_headers()
                    self.wfile.write(payload.encode())
                except OSError:
                    pass  # the client gave up (timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,),
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    yield fake
    fake.close()


def client(url: str, **kwargs: Any) -> OpenAICompatClient:
    kwargs.setdefault("backoff", 0.01)
    kwargs.setdefault("timeout", 5)
    return OpenAICompatClient(url, **kwargs)


def test_request_carries_every_sampling_parameter(server: FakeServer) -> None:
    server.replies.append(ok({"content": "Done.", "reasoning_content": "think"},
                             usage={"prompt_tokens": 100, "completion_tokens": 7,
                                    "prompt_tokens_details": {"cached_tokens": 60}}))
    sampling = Sampling(seed=7)
    with client(server.url + "/v1/", api_key=SECRET, sampling=sampling) as model:
        turn = model.complete(MESSAGES, TOOLS, TurnBudget(max_tokens=1234))
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {SECRET}"
    body = request["body"]
    assert body["messages"] == MESSAGES and body["tools"] == TOOLS
    assert body["tool_choice"] == "auto" and body["stream"] is False
    assert body["model"] == "frognano" and body["max_tokens"] == 1234
    assert {k: body[k] for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                                 "repeat_penalty", "presence_penalty", "frequency_penalty",
                                 "seed")} == {
        "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0,
        "repetition_penalty": 1.0, "repeat_penalty": 1.0, "presence_penalty": 0.0,
        "frequency_penalty": 0.0, "seed": 7}
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert (turn.content, turn.reasoning, turn.finish_reason) == ("Done.", "think", "stop")
    assert (turn.usage.prompt_tokens, turn.usage.prompt_tokens_evaluated,
            turn.usage.completion_tokens) == (100, 40, 7)
    assert turn.usage.completion_seconds > 0  # measured wall time


def test_seed_omitted_and_thinking_off(server: FakeServer) -> None:
    with client(server.url, sampling=Sampling(enable_thinking=False)) as model:
        model.complete(MESSAGES, [], TurnBudget())
    body = server.requests[0]["body"]
    assert "seed" not in body and "tools" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert server.requests[0]["path"] == "/v1/chat/completions"


def test_structured_tool_calls_and_llama_timings(server: FakeServer) -> None:
    server.replies.append(ok({
        "content": None, "reasoning": "Need the file.",
        "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "Read", "arguments": '{"file_path": "a.py", "limit": 3}'}},
            {"id": "c2", "type": "function", "function": {"name": "Bash", "arguments": "{oops"}},
            {"id": "c3", "type": "function", "function": {"name": "Glob", "arguments": "[1]"}},
        ]}, "tool_calls",
        usage={"prompt_tokens": 500, "completion_tokens": 20},
        timings={"prompt_n": 12, "prompt_ms": 250.0, "cache_n": 488, "predicted_n": 20,
                 "predicted_ms": 400.0}))
    with client(server.url) as model:
        turn = model.complete(MESSAGES, TOOLS, TurnBudget())
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("c1", "Read", {"file_path": "a.py", "limit": 3}), ("c2", "Bash", {}), ("c3", "Glob", {})]
    assert turn.tool_calls[1].raw_arguments == "{oops"
    assert (turn.content, turn.reasoning, turn.finish_reason) == ("", "Need the file.",
                                                                  "tool_calls")
    usage = turn.usage
    assert (usage.prompt_tokens, usage.prompt_tokens_evaluated, usage.completion_tokens) == (
        500, 12, 20)
    assert (usage.prompt_seconds, usage.completion_seconds) == (0.25, 0.4)


def test_tool_calls_embedded_in_content_are_parsed(server: FakeServer) -> None:
    text = ("Let me check.\n</think>\n\nReading.\n"
            + format_tool_call("Edit", {"file_path": "a.py", "old_string": "</parameter>",
                                        "new_string": "x", "replace_all": True}))
    server.replies.append(ok({"content": text}, "stop"))
    with client(server.url) as model:
        turn = model.complete(MESSAGES, TOOLS, TurnBudget())
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("Edit", {"file_path": "a.py", "old_string": "</parameter>", "new_string": "x",
                  "replace_all": True})]
    assert (turn.content, turn.reasoning, turn.finish_reason) == (
        "Reading.", "Let me check.", "tool_calls")


def test_length_finish_reason(server: FakeServer) -> None:
    server.replies.append(ok({"content": "", "reasoning_content": "long"}, "length"))
    with client(server.url) as model:
        assert model.complete(MESSAGES, TOOLS, TurnBudget()).finish_reason == "length"


def test_server_error_is_retried(server: FakeServer) -> None:
    server.replies += [Reply(500, {"error": {"message": "boom"}}), Reply(503, "busy"),
                       ok({"content": "recovered"})]
    with client(server.url, retries=3) as model:
        assert model.complete(MESSAGES, TOOLS, TurnBudget()).content == "recovered"
    assert len(server.requests) == 3


def test_persistent_server_error_raises(server: FakeServer) -> None:
    server.replies += [Reply(500, {"error": {"message": "boom"}})] * 3
    with client(server.url, retries=2, api_key=SECRET) as model, \
            pytest.raises(ModelQueryError) as info:
        model.complete(MESSAGES, TOOLS, TurnBudget())
    message = str(info.value)
    assert server.url in message and "3 tries" in message and "boom" in message
    assert SECRET not in message
    assert len(server.requests) == 3


@pytest.mark.parametrize("body", ["<html>Bad Gateway</html>", {"choices": []},
                                  {"choices": [{"message": "nope"}]}, "[1, 2]"])
def test_garbage_answer_raises(server: FakeServer, body: Any) -> None:
    server.replies.append(Reply(200, body))
    with client(server.url, retries=0) as model, pytest.raises(ModelQueryError) as info:
        model.complete(MESSAGES, TOOLS, TurnBudget())
    assert server.url in str(info.value)
    assert len(server.requests) == 1  # a wrong answer is not retried


def test_connection_refused_raises() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with client(url, retries=2, api_key=SECRET) as model, \
            pytest.raises(ModelQueryError) as info:
        model.complete(MESSAGES, TOOLS, TurnBudget())
    assert url in str(info.value) and "ConnectError" in str(info.value)
    assert SECRET not in str(info.value)


def test_slow_server_times_out(server: FakeServer) -> None:
    server.replies += [Reply(delay=1.0), Reply(delay=1.0)]
    started = time.monotonic()
    with client(server.url, retries=1, timeout=0.2) as model, \
            pytest.raises(ModelQueryError, match="timed out"):
        model.complete(MESSAGES, TOOLS, TurnBudget())
    assert time.monotonic() - started < 1.5
    assert len(server.requests) == 2


@pytest.mark.parametrize("body", [
    {"error": {"code": 400, "type": "exceed_context_size_error",
               "message": "the request exceeds the available context size, try increasing it"}},
    {"object": "error", "type": "BadRequestError", "code": 400,
     "message": "This model's maximum context length is 65536 tokens. However, you requested "
                "70000 tokens."},
])
def test_context_overflow(server: FakeServer, body: dict[str, Any]) -> None:
    server.replies.append(Reply(400, body))
    with client(server.url) as model, pytest.raises(ContextOverflow):
        model.complete(MESSAGES, TOOLS, TurnBudget())
    assert len(server.requests) == 1


def test_other_client_error_is_not_retried(server: FakeServer) -> None:
    server.replies.append(Reply(404, {"error": {"message": "model 'x' not found"}}))
    with client(server.url) as model, pytest.raises(ModelQueryError, match=r"HTTP 404.*not found"):
        model.complete(MESSAGES, TOOLS, TurnBudget())
    assert len(server.requests) == 1


@pytest.mark.parametrize(("base", "expected"), [
    ("http://h:8080", "http://h:8080/v1/chat/completions"),
    ("http://h:8080/", "http://h:8080/v1/chat/completions"),
    ("http://h:8080/v1", "http://h:8080/v1/chat/completions"),
    ("http://h/v1/chat/completions", "http://h/v1/chat/completions"),
])
def test_base_url_forms(base: str, expected: str) -> None:
    assert chat_completions_url(base) == expected
