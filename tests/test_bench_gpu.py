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
