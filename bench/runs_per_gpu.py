"""Runs per GPU (issue 12, item 5): N Leaf-shaped sessions at once, each in its own process
with its own resident model, as `frognano up --workers-per-gpu N` runs them.

The N processes load first and wait at a barrier, so the timed part is N sessions truly
side by side (in production a run worker keeps its model loaded across runs). Per N it
records sessions per hour, each stream's decode speed, the decode speed of all streams
together and, on a GPU, the VRAM the N models hold; then the N it recommends. A short GPU
loan is respected: an N whose batch cannot finish inside the budget is skipped (and said
so), and a batch that overruns is cut off, so the results always come back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.gpu import ROOT, Plan, Results, _settings, session, vram_used_mib

# A larger N must add at least this share of sessions per hour to be recommended: each
# run worker costs a model's VRAM and a CPU core, which a few percent do not pay for.
WORTH_IT = 0.10
READY = "ready"


@dataclass
class _Stream:
    """One child: its output lines, read on a thread so a silent child cannot block us."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    ended_at: float | None = None

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())
            if line.strip() == READY:
                self.ready.set()
        self.ended_at = time.monotonic()
        self.ready.set()  # a child that died before it was ready must not be waited for

    def result(self) -> dict[str, Any] | None:
        if self.process.returncode != 0 or not self.lines or self.lines[-1] == READY:
            return None
        try:
            return dict(json.loads(self.lines[-1]))
        except ValueError:
            return None


@dataclass(frozen=True)
class Batch:
    n: int
    load_s: float  # from start until every child had its model loaded
    wall_s: float  # from the go until the last session ended
    runs: list[dict[str, Any]]
    vram_loaded_mib: float | None
    vram_peak_mib: float | None
    cut: bool  # the budget ran out before every session ended


def run_batch(path: Path, plan: Plan, n: int, timeout_s: float,
              idle_mib: float | None) -> Batch:
    # CPU scale: the cores are shared out, as N workers on one host would share them.
    threads = None if plan.n_threads is None else max(1, (os.cpu_count() or 1) // n)
    spec = json.dumps({"path": str(path), "plan": asdict(replace(plan, n_threads=threads))})
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    started = time.monotonic()
    deadline = started + timeout_s
    streams = [_Stream(subprocess.Popen([sys.executable, "-m", "bench.runs_per_gpu", spec],
                                        cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True))
               for _ in range(n)]
    readers = [threading.Thread(target=s.read, daemon=True) for s in streams]
    for reader in readers:
        reader.start()
    for stream in streams:
        stream.ready.wait(max(0.0, deadline - time.monotonic()))
    loaded = time.monotonic()
    vram_loaded = _used(idle_mib)
    go = time.monotonic()
    for stream in streams:
        if stream.process.poll() is None and stream.process.stdin is not None:
            try:
                stream.process.stdin.write("go\n")
                stream.process.stdin.flush()
            except BrokenPipeError:
                pass
    peak = vram_loaded
    while any(s.process.poll() is None for s in streams) and time.monotonic() < deadline:
        used = _used(idle_mib)
        if used is not None:
            peak = max(peak or 0.0, used)
        time.sleep(1.0 if idle_mib is not None else 0.1)
    cut = False
    for stream in streams:
        if stream.process.poll() is None:
            cut = True
            stream.process.kill()
        stream.process.wait()
    for reader in readers:
        reader.join(10)
    ends = [s.ended_at for s in streams if s.ended_at is not None]
    runs = [run for run in (s.result() for s in streams) if run is not None]
    return Batch(n, loaded - started, (max(ends) if ends else time.monotonic()) - go, runs,
                 vram_loaded, peak, cut)


def _used(idle_mib: float | None) -> float | None:
    used = vram_used_mib() if idle_mib is not None else None
    return None if used is None or idle_mib is None else used - idle_mib


def record(results: Results, batch: Batch) -> float | None:
    """The batch's records; its sessions per hour (None when no session finished)."""
    n, runs = batch.n, batch.runs
    if batch.cut:
        results.add(f"N={n}: cut off by the time budget after {batch.wall_s:.0f} s", None, "",
                    n=n, metric="cut")
    if len(runs) < n and not batch.cut:
        results.add(f"N={n}: {n - len(runs)} of {n} sessions failed", None, "", n=n,
                    metric="failed")
    if not runs or batch.cut:
        return None
    per_hour = n * 3600 / batch.wall_s
    results.add(f"N={n}: sessions per hour (all {n} at once, load excluded)", per_hour,
                "runs/h", n=n, metric="sessions_per_hour", batch_wall_s=batch.wall_s,
                load_s=batch.load_s, session_walls_s=[run["wall_s"] for run in runs])
    results.add(f"N={n}: session wall time (mean of {len(runs)})",
                sum(run["wall_s"] for run in runs) / len(runs), "s", n=n, metric="session_s")
    rates = [run["completion_tokens"] / run["completion_s"] for run in runs
             if run["completion_s"] > 0]
    if rates:
        results.add(f"N={n}: decode per stream (mean)", sum(rates) / len(rates), "tokens/s",
                    n=n, metric="decode_per_stream", streams=rates)
    results.add(f"N={n}: aggregate decode (tokens generated by all / wall time)",
                sum(run["completion_tokens"] for run in runs) / batch.wall_s, "tokens/s",
                n=n, metric="aggregate_decode")
    if batch.vram_peak_mib is not None:
        results.add(f"N={n}: VRAM used by the {n} processes (peak)", batch.vram_peak_mib, "MiB",
                    n=n, metric="vram_mib", loaded_mib=batch.vram_loaded_mib)
    return per_hour


def recommend(per_hour: dict[int, float]) -> int | None:
    """The smallest N within WORTH_IT of the most sessions per hour measured."""
    if not per_hour:
        return None
    best = max(per_hour.values())
    return min(n for n, value in per_hour.items() if value >= (1 - WORTH_IT) * best)


def measure_runs(path: Path, plan: Plan, results: Results, deadline: float) -> None:
    """Every N of the plan that fits before `deadline` (time.monotonic())."""
    idle = vram_used_mib()  # the parent's own model is unloaded by now
    per_hour: dict[int, float] = {}
    previous: Batch | None = None
    for n in plan.concurrency:
        left = deadline - time.monotonic()
        # At worst sharing gains nothing: N sessions take N / N_before as long.
        projected = (previous.load_s + previous.wall_s * n / previous.n) if previous else 0.0
        if left <= 0 or projected > left:
            why = (f"about {projected:.0f} s needed, {max(left, 0):.0f} s" if previous
                   else "none")
            results.add(f"N={n}: skipped, {why} of the time budget left", None, "", n=n,
                        metric="skipped")
            continue
        batch = run_batch(path, plan, n, left, idle)
        got = record(results, batch)
        if got is not None:
            per_hour[n] = got
            previous = batch
    pick = recommend(per_hour)
    if pick is not None:
        results.add(f"recommended run workers per GPU: the smallest N within "
                    f"{WORTH_IT:.0%} of the most sessions per hour (of N = "
                    f"{', '.join(map(str, per_hour))})", pick, "", metric="recommended")


_COLUMNS = (("sessions_per_hour", "sessions / hour"), ("session_s", "session wall (mean)"),
            ("decode_per_stream", "decode per stream"),
            ("aggregate_decode", "generated, all streams / wall"), ("vram_mib", "VRAM (peak)"))


CPU_NOTE = ("- CPU scale, not a GPU figure: the N processes share this machine's cores "
            "(each gets cores / N threads), so a larger N can gain little here; what it shows is "
            "that the measurement works.")


def render_table(records: list[dict[str, Any]], kind: str = "gpu") -> list[str]:
    """The N records as one table (N down, measures across) and the notes under it."""
    by_n: dict[int, dict[str, dict[str, Any]]] = {}
    notes = []
    for record_ in records:
        if "n" in record_:
            by_n.setdefault(record_["n"], {})[record_["metric"]] = record_
            if record_["value"] is None:
                notes.append(f"- {record_['name']}")
        elif record_.get("metric") == "recommended":
            notes.append(f"- **{record_['name']}: N = {record_['value']:g}**")
    if not by_n:
        return []
    columns = [(key, title) for key, title in _COLUMNS
               if key == "sessions_per_hour" or any(key in row for row in by_n.values())]
    lines = ["", "Runs per GPU: N sessions at once, each its own process and model "
             "(`frognano up --workers-per-gpu N`):", "",
             "| N | " + " | ".join(title for _, title in columns) + " |",
             "|---:|" + "---:|" * len(columns)]
    for n, row in sorted(by_n.items()):
        cells = [f"{row[key]['value']:,.1f} {row[key]['unit']}" if key in row and
                 row[key]["value"] is not None else "–" for key, _ in columns]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    if kind == "cpu-scale":
        notes.append(CPU_NOTE)
    return lines + (["", *notes] if notes else [])


def _child(arg: str) -> int:
    spec = json.loads(arg)
    plan = Plan(**{**spec["plan"], "prefill": tuple(spec["plan"]["prefill"]),
                   "concurrency": tuple(spec["plan"]["concurrency"])})

    def at_the_barrier() -> None:  # loaded: say so, and start when every stream is
        print(READY, flush=True)
        sys.stdin.readline()

    got = session(Path(spec["path"]), _settings(plan), "partial", plan.turns, plan.tool_chars,
                  ready=at_the_barrier)
    print(json.dumps(got), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
