"""`python3 -m bench gpu --cpu-scale` end to end: the GPU benchmark's code, at a small
scale on the CPU, writes the records the GPU run will (issue 12, item 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT


def test_cpu_scale_bench_writes_its_records(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # A child process: a crash in llama.cpp fails this test, not the pytest run.
    done = subprocess.run(
        [sys.executable, "-m", "bench", "gpu", "--cpu-scale", "--no-write", "--turns", "12",
         "--concurrency", "1,2", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # 4 min on 2 busy cores
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

    # Runs per GPU: each N's streams ran side by side, each its own process and model.
    runs = {(r["n"], r["metric"]): r for r in records if "n" in r}
    assert {n for n, _ in runs} == {1, 2}
    assert not [key for key in runs if key[1] in ("failed", "cut", "skipped")], runs
    for n in (1, 2):
        per_hour = runs[n, "sessions_per_hour"]
        assert len(per_hour["session_walls_s"]) == n, "every stream finished its session"
        # N sessions at once: the batch takes at least its slowest session, and sessions
        # per hour is N of them in that time (not the sum of each stream's own rate).
        assert per_hour["batch_wall_s"] >= max(per_hour["session_walls_s"]) * 0.99
        assert per_hour["value"] == pytest.approx(n * 3600 / per_hour["batch_wall_s"])
        assert runs[n, "decode_per_stream"]["value"] > 0
        assert len(runs[n, "decode_per_stream"]["streams"]) == n
        assert runs[n, "aggregate_decode"]["value"] > 0
        assert (n, "vram_mib") not in runs, "no VRAM figure without nvidia-smi"
    [recommended] = [r for r in records if r.get("metric") == "recommended"]
    assert recommended["value"] in (1, 2)
    assert not any(r["name"].endswith("failed") for r in records)


def test_steps_that_do_not_fit_the_time_budget_are_skipped_and_said(tmp_path: Path) -> None:
    # A budget already spent by the first sessions: every N and both references are
    # skipped with a line each, and the run still ends well and renders.
    done = subprocess.run(
        [sys.executable, "-m", "bench", "gpu", "--cpu-scale", "--no-write", "--turns", "2",
         "--concurrency", "1,2", "--budget-s", "0", "--out", str(tmp_path)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    skipped = [r["name"] for r in records if "skipped" in r["name"]]
    assert [name.split(":")[0] for name in skipped] == [
        "N=1", "N=2", "append-only, recovery full", "re-render every turn"], skipped
    assert {r.get("session") for r in records if "session" in r} == {
        "append-only, recovery partial", "append-only, recovery off"}
    assert "| 1 | – |" in done.stdout and "N=1: skipped, none of the time budget left" \
        in done.stdout


def test_the_recommended_n_is_the_smallest_within_ten_percent_of_the_best() -> None:
    from bench.runs_per_gpu import recommend

    assert recommend({}) is None
    assert recommend({1: 100.0, 2: 190.0, 4: 300.0, 8: 320.0}) == 4  # 8 adds under 10%
    assert recommend({1: 100.0, 2: 190.0, 4: 300.0, 8: 340.0}) == 8
    assert recommend({1: 100.0, 2: 95.0}) == 1  # sharing that loses is not taken


def test_runs_per_gpu_render_as_one_table_with_the_recommendation() -> None:
    from bench.gpu import render

    records = [{"name": "device", "kind": "gpu", "device": "NVIDIA H200"},
               {"name": "load time", "value": 2.0, "unit": "s"}]
    for n, per_hour, vram in ((1, 100.0, 5000.0), (2, 180.0, 10000.0)):
        records += [
            {"name": f"N={n}: sessions per hour", "value": per_hour, "unit": "runs/h",
             "n": n, "metric": "sessions_per_hour"},
            {"name": f"N={n}: VRAM", "value": vram, "unit": "MiB", "n": n, "metric": "vram_mib"}]
    records += [{"name": "N=4: skipped, about 90 s needed, 10 s left", "value": None,
                 "unit": "", "n": 4, "metric": "skipped"},
                {"name": "recommended run workers per GPU", "value": 2, "unit": "",
                 "metric": "recommended"}]
    _, block = render(records)
    assert "| load time | 2.000 s |" in block
    assert "| 2 | 180.0 runs/h | 10,000.0 MiB |" in block
    assert "| 4 | – | – |" in block and "- N=4: skipped, about 90 s needed" in block
    assert "**recommended run workers per GPU: N = 2**" in block
    assert "| N=1: sessions per hour |" not in block, "not in the flat table too"


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
    from tests.support.gguf_factory import frognano_shape

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


# nvidia-smi as the GPU run will meet it, faked (no GPU here): each bench child process
# "holds" 500 MiB, so the VRAM figures must come out as 500 × N over the idle reading.
FAKE_NVIDIA_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=name) echo "NVIDIA Fake" ;;
  --query-gpu=memory.used) echo $(( 1000 + 500 * $(pgrep -fc 'bench[.]runs_per_gpu') )) ;;
  *) exit 9 ;;
esac
"""


def test_vram_is_read_per_n_while_the_streams_run(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (tools / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "gpu", "--cpu-scale", "--no-write", "--turns", "3",
         "--concurrency", "1,2", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert records[0]["device"] == "NVIDIA Fake"
    vram = {r["n"]: r for r in records if r.get("metric") == "vram_mib"}
    assert {n: r["value"] for n, r in vram.items()} == {1: 500.0, 2: 1000.0}
    assert {n: r["loaded_mib"] for n, r in vram.items()} == {1: 500.0, 2: 1000.0}
    assert "| 2 | " in done.stdout and "1,000.0 MiB |" in done.stdout


def test_an_n_whose_batch_would_overrun_is_skipped_from_the_last_one_s_time(
        tmp_path: Path) -> None:
    # N=1 fits; 1,000 sessions at once, scaled from N=1's batch as if sharing gained
    # nothing (≥ 1,000 × 0.1 s), cannot fit in what is left of 120 s: skipped, not started.
    done = subprocess.run(
        [sys.executable, "-m", "bench", "gpu", "--cpu-scale", "--no-write", "--turns", "2",
         "--concurrency", "1,1000", "--budget-s", "120", "--out", str(tmp_path)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=200)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    metrics = {(r["n"], r["metric"]) for r in records if "n" in r}
    assert (1, "sessions_per_hour") in metrics and (1000, "skipped") in metrics
    [skipped] = [r["name"] for r in records if r.get("metric") == "skipped"]
    needed, left = (int(word) for word in skipped.split() if word.isdigit())
    assert needed > left, skipped
    assert any(r.get("session") == "re-render every turn" for r in records), \
        "the references still run with the time left"
