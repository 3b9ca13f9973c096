"""`python3 -m bench gpu --cpu-scale` end to end: the GPU benchmark's code, at a small
scale on the CPU, writes the records the GPU run will (issue 12, item 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_cpu_scale_bench_writes_its_records(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # A child process: a crash in llama.cpp fails this test, not the pytest run.
    done = subprocess.run(
        [sys.executable, "-m", "bench", "gpu", "--cpu-scale", "--no-write", "--turns", "12",
         "--concurrency", "1,2", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    by_name = {record["name"]: record for record in records}
    assert records[0]["kind"] == "cpu-scale" and "CPU" in records[0]["device"]

    speeds = [r for r in records if r["name"].startswith(("prefill", "decode"))]
    assert len(speeds) == 4 and all(r["value"] > 0 for r in speeds)
    assert by_name["load time"]["value"] > 0

    sessions = {r["session"]: r for r in records if "session" in r}
    assert set(sessions) == {"append-only, recovery partial", "append-only, recovery off",
                             "append-only, recovery full", "re-render every turn"}
    for label in ("append-only, recovery partial", "append-only, recovery off",
                  "append-only, recovery full"):
        got = sessions[label]
        assert got["evaluated"] / got["sent"] < 0.2, (label, got)
        assert got["fallbacks"] == 0, f"{label}: turns fell back to a full re-render"
    assert sessions["re-render every turn"]["evaluated"] == sessions["re-render every turn"]["sent"]
    partial = sessions["append-only, recovery partial"]["recovery_bytes"]
    full = sessions["append-only, recovery full"]["recovery_bytes"]
    assert 0 < partial < full

    per_hour = {r["n"]: r["value"] for r in records if "n" in r}
    assert set(per_hour) == {1, 2} and all(v > 0 for v in per_hour.values())
    assert not any(r["name"].endswith("failed") for r in records)


def test_skipped_with_a_clear_line_without_gpu_offload() -> None:
    import llama_cpp

    if llama_cpp.llama_supports_gpu_offload():
        return  # on a CUDA build it would run the whole GPU benchmark
    done = subprocess.run([sys.executable, "-m", "bench", "gpu", "--no-write"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert "skipped" in done.stdout and "no GPU offload" in done.stdout


def test_full_shape_is_qwen35_4b_and_scaled_shapes_stay_quantisable() -> None:
    from tests.gguf_factory import frognano_shape

    assert frognano_shape(1.0) == {
        "n_layer": 32, "full_attention_interval": 4, "n_embd": 2560, "n_ff": 9216,
        "n_head": 16, "n_head_kv": 4, "head_dim": 256, "ssm_k_heads": 16, "ssm_v_heads": 32,
        "ssm_head_dim": 128, "d_conv": 4, "n_vocab": 248_320}
    for scale in (0.05, 0.1, 0.25, 0.5):
        s = frognano_shape(scale)
        # Every K-quant matrix's input (ne0) is a multiple of the 256-element block.
        inputs = (s["n_embd"], s["n_ff"], s["n_head"] * s["head_dim"],
                  s["ssm_v_heads"] * s["ssm_head_dim"])
        assert all(n % 256 == 0 for n in inputs), (scale, s)
        assert s["n_layer"] % s["full_attention_interval"] == 0


def test_gpu_blocks_survive_a_full_bench_rewrite(tmp_path: Path) -> None:
    from bench.__main__ import _gpu_blocks
    from bench.gpu import render, write_doc

    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n\n## sandbox\n\n| a |\n")
    kind, block = render([{"name": "device", "kind": "gpu", "device": "NVIDIA H200"},
                          {"name": "decode after 8192 tokens", "value": 230.0, "unit": "tokens/s"}])
    write_doc(kind, block, doc)
    write_doc(kind, block.replace("230.000", "239.000"), doc)  # replaced, not appended
    text = doc.read_text()
    assert text.count("<!-- bench gpu: gpu -->") == 1 and "239.000 tokens/s" in text
    assert "NVIDIA H200" in _gpu_blocks(text) and "## sandbox" not in _gpu_blocks(text)
