"""`python3 -m bench gpu`: FrogNano-shaped speed on a GPU (issue 12, items 4 and 5).

On a random-weight GGUF with FrogNano-4B's shape (tests/support/gguf_factory.py; speed depends on
shapes and quantisation, not weight values): load time, prefill and decode after 8k and
32k tokens, the 30-turn Leaf-shaped session (a Read call per turn, ~1,500 characters of
tool output) append-only with each recovery state and re-rendered, VRAM, and runs per
hour for N concurrent sessions, each its own process with its own resident model
(bench/runs_per_gpu.py).

Every figure is appended to results.jsonl as soon as it is measured (a timeout on a
short GPU loan still leaves what was measured), then rendered into docs/BENCHMARKS.md.
The most wanted figures come first, and a step that would not fit in the time budget
(one 600 s device call) is skipped with a line saying so.
Without GPU offload it is skipped unless `--cpu-scale` asks for the small CPU run (the
same code at a fraction of the shape, which is how it is tested).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "BENCHMARKS.md"


@dataclass(frozen=True)
class Plan:
    kind: str  # "gpu" or "cpu-scale": the docs block it is rendered into
    scale: float
    n_ctx: int
    prefill: tuple[int, ...]
    decode_tokens: int
    turns: int
    tool_chars: int
    rerender_turns: int
    concurrency: tuple[int, ...]
    n_threads: int | None
    budget_s: float  # for the whole measurement; what would not fit is skipped


# 510 s: the device's one 600 s call, less gpu_bench.sh's own start and a margin.
GPU_PLAN = Plan("gpu", 1.0, 65536, (8192, 32768), 64, 30, 1500, 12, (1, 2, 4, 8), None, 510)
CPU_PLAN = Plan("cpu-scale", 0.1, 16384, (512, 2048), 16, 30, 150, 6, (1, 2), 2, 3600)


class Results:
    """results.jsonl, written line by line and flushed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def add(self, name: str, value: float | None, unit: str, **extra: Any) -> None:
        record = {"name": name, "value": value, "unit": unit, **extra}
        with self.path.open("a") as out:
            out.write(json.dumps(record) + "\n")
        shown = "–" if value is None else f"{value:.3f}"
        print(f"  {name}: {shown} {unit}", flush=True)


def device_name() -> str:
    gpu = _nvidia_smi("name")
    if gpu:
        return gpu[0]
    model = "CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} cores, CPU)"


def _nvidia_smi(query: str) -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=30)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def vram_used_mib() -> float | None:
    used = _nvidia_smi("memory.used")
    return float(used[0]) if used else None


def _settings(plan: Plan, n_threads: int | None = None) -> Any:
    from solver.models.llama_resident import LlamaSettings

    return LlamaSettings(n_ctx=plan.n_ctx, n_threads=n_threads or plan.n_threads)


def _endoftext_bias(model: Any) -> dict[int, float]:
    # Random weights end a grammar-constrained turn with either end-of-generation token;
    # FrogNano ends with <|im_end|>, and <|endoftext|> would force a full re-render next.
    ids = model.tokenize("<|endoftext|>")
    return {ids[0]: -1e9} if len(ids) == 1 else {}


def session(path: Path, settings: Any, recovery: str | None, turns: int, tool_chars: int,
            rerender: bool = False, ready: Callable[[], None] | None = None) -> dict[str, Any]:
    """One Leaf-shaped session: each turn a grammar-forced Read call, answered by
    `tool_chars` characters of file content. `ready` is called once the model is loaded,
    before the first turn (the runs-per-GPU barrier)."""
    from bench.prompt_reuse import GRAMMAR, SYSTEM, TOOLS
    from solver.models.base import Sampling, TurnBudget
    from solver.models.llama_cpp import LlamaCppModel

    def new_model() -> LlamaCppModel:
        return LlamaCppModel(path, settings=settings, sampling=Sampling(seed=7), grammar=GRAMMAR,
                             logit_bias=bias, recovery=recovery)  # type: ignore[arg-type]

    bias: dict[int, float] = {}
    model = new_model()
    bias = _endoftext_bias(model)
    model = new_model()
    model.resident.llm.reset()
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": "Fix src/app.py."}]
    line = "    return a - b  # src/app.py, a line of the file being read\n"
    sent = evaluated = fallbacks = generated = 0
    decode_s = 0.0
    times: list[float] = []
    if ready is not None:
        ready()
    for index in range(turns):
        if rerender and index:
            model = new_model()
        started = time.perf_counter()
        turn = model.complete(messages, TOOLS, TurnBudget(max_tokens=300))
        times.append(time.perf_counter() - started)
        sent += turn.usage.prompt_tokens
        evaluated += turn.usage.prompt_tokens_evaluated
        generated += turn.usage.completion_tokens
        decode_s += turn.usage.completion_seconds
        fallbacks += model.last_prompt_path == "full" and not rerender
        body = "".join(f"{n + 1}\t{line}" for n in range(max(1, tool_chars // (len(line) + 3))))
        messages += [turn.to_message(), {"role": "tool", "tool_call_id": turn.tool_calls[0].id,
                                         "content": f"src/app.py (turn {index})\n{body}"}]
    snapshot = model._conversation.snapshot if model._conversation else None
    return {"wall_s": sum(times), "last_turns_s": sum(times[-3:]) / min(3, len(times)),
            "sent": sent, "evaluated": evaluated, "prompt_tokens": turn.usage.prompt_tokens,
            "fallbacks": fallbacks, "recovery_bytes": len(snapshot.state) if snapshot else 0,
            "completion_tokens": generated, "completion_s": decode_s}


def prefill_decode(path: Path, settings: Any, tokens: int, decode: int) -> tuple[float, float, int]:
    from solver.models.base import Sampling, TurnBudget
    from solver.models.llama_cpp import LlamaCppModel

    probe = LlamaCppModel(path, settings=settings)
    never_stop = {t: -1e9 for t in range(probe.resident.llm.n_vocab())
                  if probe.resident.is_end_of_generation(t)}
    model = LlamaCppModel(path, settings=settings, logit_bias=never_stop, recovery=None,
                          sampling=Sampling(seed=0, enable_thinking=False))
    chars = tokens
    for _ in range(2):  # the filler's tokens per character, measured then matched
        messages = [{"role": "user", "content": "Summarise: " + "abc def ghi " * (chars // 12)}]
        have = len(model.tokenize(model.render_prompt(messages, [])))
        chars = int(chars * tokens / have)
    model.resident.llm.reset()
    usage = model.complete(messages, [], TurnBudget(max_tokens=decode)).usage
    return (usage.prompt_tokens_evaluated / usage.prompt_seconds,
            usage.completion_tokens / usage.completion_seconds, usage.prompt_tokens_evaluated)


def measure(plan: Plan, out: Path) -> Path:
    from bench.runs_per_gpu import measure_runs
    from solver.models.llama_resident import load_resident, unload_all
    from tests.support.gguf_factory import frognano_shape, make_frognano_shaped

    deadline = time.monotonic() + plan.budget_s
    results = Results(out / "results.jsonl")
    device = device_name()
    results.add("device", None, "", device=device, kind=plan.kind, scale=plan.scale,
                shape=frognano_shape(plan.scale), date=time.strftime("%Y-%m-%d"),
                python=platform.python_version(), budget_s=plan.budget_s)
    started = time.perf_counter()
    # Not under `out`: a 2.9 GB file has no place among the results that travel back.
    gguf_path = Path(tempfile.gettempdir()) / f"frognano-shaped-x{plan.scale:g}.gguf"
    path = make_frognano_shaped(gguf_path, scale=plan.scale, context_length=plan.n_ctx)
    results.add("GGUF generated", time.perf_counter() - started, "s",
                size_mib=path.stat().st_size / 2**20)
    results.add("GGUF size", path.stat().st_size / 2**20, "MiB")
    idle = vram_used_mib()
    settings = _settings(plan)
    resident = load_resident(path, settings)
    results.add("load time", resident.load_seconds, "s")
    loaded = vram_used_mib()
    if loaded is not None and idle is not None:
        results.add("VRAM used by the loaded model and its context", loaded - idle, "MiB")
    for tokens in plan.prefill:
        prefill, decode, evaluated = prefill_decode(path, settings, tokens, plan.decode_tokens)
        results.add(f"prefill, {evaluated}-token prompt", prefill, "tokens/s")
        results.add(f"decode after {evaluated} tokens", decode, "tokens/s")

    def one_session(label: str, recovery: str | None, turns: int, rerender: bool) -> float:
        got = session(path, settings, recovery, turns, plan.tool_chars, rerender)
        name = f"{label}, {turns} turns ({got['prompt_tokens']} prompt tokens at the end)"
        results.add(f"{name}: wall time", got["wall_s"], "s", session=label, **got)
        results.add(f"{label}: last turns (mean of 3)", got["last_turns_s"], "s")
        results.add(f"{label}: prompt tokens evaluated / sent", got["evaluated"] / got["sent"], "")
        if recovery:
            results.add(f"{label}: state kept per turn", got["recovery_bytes"] / 2**20, "MiB")
        return float(got["wall_s"])

    # First what is not known yet: the recovery target (partial within 10% of off) ...
    one_session("append-only, recovery partial", "partial", plan.turns, False)
    off_s = one_session("append-only, recovery off", None, plan.turns, False)
    peak = vram_used_mib()
    if peak is not None and idle is not None:
        results.add("VRAM used after the sessions", peak - idle, "MiB")
    unload_all()
    # ... and runs per GPU; then the two references issue 12 measured already, if they fit
    # (full recovery took 2.1x a session without, re-rendering 12 turns 0.6x a whole one).
    measure_runs(path, plan, results, deadline)
    for label, recovery, turns, rerender, factor in [
            ("append-only, recovery full", "full", plan.turns, False, 2.5),
            ("re-render every turn", None, plan.rerender_turns, True, 1.0)]:
        left = deadline - time.monotonic()
        if off_s * factor > left:
            results.add(f"{label}: skipped, about {off_s * factor:.0f} s needed, "
                        f"{max(left, 0):.0f} s of the time budget left", None, "")
            continue
        one_session(label, recovery, turns, rerender)
    unload_all()
    path.unlink()
    return results.path


def render(records: list[dict[str, Any]]) -> tuple[str, str]:
    head = records[0]
    kind = head.get("kind", "gpu")
    what = (f"CPU, small scale (shape scaled by {head.get('scale')}; mechanics, not speed)"
            if kind == "cpu-scale" else f"{head.get('device')}, FrogNano's full shape")
    lines = [f"### {what}", "",
             f"Measured on {head.get('date')} on {head.get('device')}, "
             f"Python {head.get('python')}; "
             f"shape {json.dumps(head.get('shape'))}.", "",
             "| measure | value |", "|---|---:|"]
    for record in records[1:]:
        if "metric" in record:  # runs per GPU: a table of their own
            continue
        value = record["value"]
        shown = "–" if value is None else f"{value:,.3f} {record['unit']}".rstrip()
        lines.append(f"| {record['name']} | {shown} |")
    from bench.runs_per_gpu import render_table

    lines += render_table(records[1:], kind)
    return kind, "\n".join(lines) + "\n"


def write_doc(kind: str, block: str, doc: Path = DOC) -> None:
    """Replace this kind's block in docs/BENCHMARKS.md (`python3 -m bench` keeps it)."""
    start, end = f"<!-- bench gpu: {kind} -->", f"<!-- /bench gpu: {kind} -->"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    wrapped = f"{start}\n{block}{end}"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + wrapped + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + wrapped + "\n"
    doc.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench gpu")
    parser.add_argument("--cpu-scale", action="store_true",
                        help="run the small CPU-scale version (no GPU needed)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default: $OUT, else build/bench-gpu)")
    parser.add_argument("--turns", type=int, help="session turns (default: 30)")
    parser.add_argument("--concurrency", help="N values, comma-separated (e.g. 1,2,4,8)")
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/BENCHMARKS.md")
    parser.add_argument("--render-from", type=Path, metavar="RESULTS_JSONL",
                        help="only render a results.jsonl (e.g. one a GPU run brought back)")
    parser.add_argument("--budget-s", type=float,
                        help="time for the whole measurement; a step that would not fit is "
                             "skipped (default 510 on a GPU, 3600 at CPU scale)")
    args = parser.parse_args(argv)
    if args.render_from:
        records = [json.loads(line) for line in args.render_from.read_text().splitlines() if line]
        kind, block = render(records)
        print(block)
        write_doc(kind, block)
        return 0
    import llama_cpp

    if not args.cpu_scale and not llama_cpp.llama_supports_gpu_offload():
        print("bench gpu: skipped: this llama-cpp-python has no GPU offload (a CPU build). "
              "On a GPU machine run scripts/gpu_bench.sh; for the small CPU run: "
              "python3 -m bench gpu --cpu-scale")
        return 0
    plan = CPU_PLAN if args.cpu_scale else GPU_PLAN
    if args.turns:
        plan = replace(plan, turns=args.turns, rerender_turns=min(plan.rerender_turns, args.turns))
    if args.concurrency:
        plan = replace(plan, concurrency=tuple(int(n) for n in args.concurrency.split(",")))
    if args.budget_s is not None:
        plan = replace(plan, budget_s=args.budget_s)
    out = args.out or Path(os.environ.get("OUT") or ROOT / "build" / "bench-gpu")
    print(f"bench gpu ({plan.kind}): results into {out / 'results.jsonl'}", flush=True)
    results = measure(plan, out)
    records = [json.loads(line) for line in results.read_text().splitlines() if line]
    kind, block = render(records)
    print(block)
    if not args.no_write:
        write_doc(kind, block)
        print(f"written to {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
