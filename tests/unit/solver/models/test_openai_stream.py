"""The OpenAI-compatible client streams a turn when someone watches it (TurnBudget's
on_tokens: the loop, for the terminal's live line), from a real HTTP server that answers
as llama-server does (server-sent events, a chunk a token, usage and timings in the last):
the tokens are reported as they come, the turn is put back together as the plain answer
would carry it, and a turn whose time runs out keeps its partial text (TurnCutOff)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from solver.agent.transcript import read_transcript
from solver.models.base import TurnBudget, TurnCutOff
from solver.models.openai_compat import OpenAICompatClient
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

MESSAGES = [{"role": "user", "content": "Fix add()."}]


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


class StreamingServer:
    """Sends `chunks` as server-sent events, `pause` seconds apart."""

    def __init__(self, chunks: list[dict[str, Any]], pause: float) -> None:
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer.bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    for item in chunks:
                        self.wfile.write(f"data: {json.dumps(item)}\n\n".encode())
                        self.wfile.flush()
                        time.sleep(pause)
                    self.wfile.write(b"data: [DONE]\n\n")
                except OSError:
                    pass  # the client stopped reading (the cut-off turn)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[StreamingServer] = []

    def start(chunks: list[dict[str, Any]], pause: float = 0.0) -> StreamingServer:
        servers.append(StreamingServer(chunks, pause))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_a_streamed_turn_reports_its_tokens_and_reads_as_the_plain_answer(serve: Any) -> None:
    server = serve([
        chunk({"role": "assistant", "reasoning_content": "add uses "}),
        chunk({"reasoning_content": "minus."}),
        chunk({"content": "Reading "}), chunk({"content": "it."}),
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "Read",
                                                                    "arguments": '{"file_'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'path": "calc.py"}'}}]}),
        chunk({}, "tool_calls", usage={"prompt_tokens": 40, "completion_tokens": 6},
              timings={"prompt_n": 40, "prompt_ms": 20.0, "predicted_n": 6,
                       "predicted_ms": 60.0})])
    seen: list[int] = []
    turn = OpenAICompatClient(server.url, timeout=10).complete(
        MESSAGES, [], TurnBudget(on_tokens=seen.append))
    assert server.bodies[0]["stream"] is True
    assert seen == [1, 2, 3, 4, 5, 6]
    assert (turn.reasoning, turn.content) == ("add uses minus.", "Reading it.")
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("c1", "Read", {"file_path": "calc.py"})]
    assert turn.finish_reason == "tool_calls"
    assert (turn.usage.completion_tokens, turn.usage.prompt_tokens_evaluated) == (6, 40)


def test_without_a_watcher_the_request_is_not_streamed(serve: Any) -> None:
    server = serve([])
    with pytest.raises(Exception):  # noqa: B017 - an event stream is not a JSON answer
        OpenAICompatClient(server.url, timeout=5, retries=0).complete(MESSAGES, [],
                                                                      TurnBudget())
    assert server.bodies[0]["stream"] is False


def test_a_turn_whose_time_runs_out_keeps_its_text(serve: Any) -> None:
    server = serve([chunk({"content": "<that>"}) for _ in range(200)], pause=0.02)
    seen: list[int] = []
    with pytest.raises(TurnCutOff) as cut:
        OpenAICompatClient(server.url, timeout=10).complete(
            MESSAGES, [], TurnBudget(timeout=1.0, on_tokens=seen.append))
    partial = cut.value.partial
    assert partial.finish_reason == "length"
    assert 5 < partial.usage.completion_tokens == seen[-1] < 200
    assert partial.content == "<that>" * seen[-1]
    assert f"({seen[-1]} tokens)" in str(cut.value)


@pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")
def test_solve_shows_a_slow_server_turn_growing_and_explains_it(serve: Any, calc_repo: Path,
                                                               tmp_path: Path) -> None:
    """`frognano solve` against a server that streams on and never ends its turn, through a
    pipe: the progress lines carry the growing token count the stream reports, and the end
    says what happened, the partial text in the transcript."""
    server = serve([chunk({"content": "<that>"}) for _ in range(5000)], pause=0.01)
    transcript = tmp_path / "t.jsonl"
    with reachable_dir() as work:
        proc = subprocess.run(
            [sys.executable, "-m", "frognano", "solve", str(calc_repo), "--issue", "Fix add.",
             "--model", server.url, "--timeout-minutes", "0.2", "--max-rounds", "1",
             "--transcript", str(transcript)],
            env={**os.environ, "FROGNANO_STATE_DIR": str(tmp_path / "state"),
                 "FROGNANO_WORK_DIR": str(work / "work"), "FROGNANO_PROGRESS_SECONDS": "1"},
            capture_output=True, text=True, timeout=120)
    output = " ".join((proc.stdout + proc.stderr).split())
    counts = [int(n.replace(",", "")) for n in
              re.findall(r"progress: thinking · step 1 · tool - · turn \d\d:\d\d, ([\d,]+) "
                         r"tokens", proc.stdout)]
    assert len(counts) >= 3 and counts == sorted(counts) and counts[-1] > counts[0], output
    generated = re.search(r"turn_timeout after 1 steps, .*?, (\d+) tokens generated", output)
    assert generated, output
    assert f"the model generated {int(generated[1]):,} tokens without ending its turn" in output
    turns = [r for r in read_transcript(transcript) if r["kind"] == "turn"]
    assert turns[0]["assistant"]["content"].startswith("<that><that>")


@pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")
def test_a_turn_past_its_own_time_limit_ends_the_run_as_turn_timeout(serve: Any,
                                                                      tmp_path: Path) -> None:
    """A server that answers but never ends its turn, under a 1 s turn limit and an hour's
    run: the run ends as `turn_timeout`, not `llm_query_error` (the server did not fail),
    and its headline says the turn ran out of time (issue 33 §3)."""
    from bot.messages import EXIT_REASON_WORDS
    from solver.agent.harness import Limits, solve
    from solver.agent.transcript import Transcript
    from tests.support.sandbox_support import host_repo, running_sandbox

    server = serve([chunk({"content": "<that>"}) for _ in range(2000)], pause=0.01)
    path = tmp_path / "t.jsonl"
    with running_sandbox("bubblewrap") as sandbox, Transcript(path) as transcript:
        result = solve(OpenAICompatClient(server.url, timeout=30), sandbox, "Fix it.",
                       "test -f FIXED", transcript, repo=host_repo(sandbox),
                       limits=Limits(turn_timeout=1.0, max_rounds=1, max_seconds=3600))
    assert result.exit_reason == "turn_timeout", result
    assert "the turn's time ran out after" in result.error
    assert read_transcript(path)[-1]["exit_reason"] == "turn_timeout"
    assert EXIT_REASON_WORDS["turn_timeout"] == ("the model's turn ran out of time before "
                                                 "the model ended it")
