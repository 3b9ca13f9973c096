"""Prompt reuse on the hybrid model: append-only token history vs re-rendering.

A 30-turn agent session on the tiny random-weight qwen35 GGUF (hybrid, like
FrogNano); a GBNF grammar makes every turn a Read call so the session has the
shape of a real one. The naive path renders the whole history every turn (a new
backend instance per turn, sharing the resident model), which is what an agent
loop without token-level history does.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from tests.gguf_factory import make_tiny_qwen35
from workers.models.base import Sampling, TurnBudget
from workers.models.llama_cpp import LlamaCppModel, LlamaSettings

TURNS = 30
SETTINGS = LlamaSettings(n_ctx=16384)
SYSTEM = "You are a software-engineering agent working in a checked-out repository."
TOOLS = [{"type": "function", "function": {
    "name": "Read", "description": "Read a text file. Returns numbered lines.",
    "parameters": {"type": "object", "properties": {
        "file_path": {"type": "string", "description": "Path to the file to read."},
        "limit": {"type": "integer", "description": "Optional maximum number of lines."}},
        "required": ["file_path"]}}}]
CALL = ("Reading.\n</think>\n\n<tool_call>\n<function=Read>\n<parameter=file_path>\nsrc/app.py\n"
        "</parameter>\n<parameter=limit>\n5\n</parameter>\n</function>\n</tool_call>")
GRAMMAR = 'root ::= "' + CALL.replace("\n", "\\n") + '"'


def _session(path: Path, fresh_instance_each_turn: bool) -> tuple[int, int, float]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": "Fix src/app.py."}]
    sent = evaluated = 0
    model = None
    started = time.perf_counter()
    for index in range(TURNS):
        if model is None or fresh_instance_each_turn:
            model = LlamaCppModel(path, settings=SETTINGS, sampling=Sampling(seed=7),
                                  grammar=GRAMMAR)
        turn = model.complete(messages, TOOLS, TurnBudget(max_tokens=300))
        sent += turn.usage.prompt_tokens
        evaluated += turn.usage.prompt_tokens_evaluated
        messages += [turn.to_message(),
                     {"role": "tool", "tool_call_id": turn.tool_calls[0].id,
                      "content": f"src/app.py\n{index + 1}. return a - b"}]
    return sent, evaluated, time.perf_counter() - started


def run() -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        path = make_tiny_qwen35(Path(tmp) / "tiny-qwen35.gguf", context_length=16384)
        append_sent, append_eval, append_wall = _session(path, fresh_instance_each_turn=False)
        naive_sent, naive_eval, naive_wall = _session(path, fresh_instance_each_turn=True)
    append_ratio = append_eval / append_sent
    return [
        {"name": f"append-only: prompt tokens evaluated / sent ({TURNS} turns)",
         "value": append_ratio, "unit": "", "target": "≤ 0.10", "ok": append_ratio <= 0.10},
        {"name": "append-only: prompt tokens evaluated", "value": append_eval, "unit": "tokens",
         "target": "", "ok": None},
        {"name": f"re-render: prompt tokens evaluated / sent ({TURNS} turns)",
         "value": naive_eval / naive_sent, "unit": "", "target": "", "ok": None},
        {"name": "re-render: prompt tokens evaluated", "value": naive_eval, "unit": "tokens",
         "target": "", "ok": None},
        {"name": "append-only: session wall time", "value": append_wall, "unit": "s",
         "target": "", "ok": None},
        {"name": "re-render: session wall time", "value": naive_wall, "unit": "s",
         "target": "", "ok": None},
    ]
