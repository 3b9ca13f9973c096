"""Sandbox overhead: a Bash tool round trip through the persistent bubblewrap runner,
against a bare `bash -lc true`, and the cost of starting and tearing down a sandbox.

    python -m bench.sandbox_overhead
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from sandbox import SandboxConfig, open_sandbox

ROUND_TRIPS = 200
STARTS = 10
TARGET_MS = 30.0
TARGET_RATIO = 3.0


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000.0


def _timed(action: Any, times: int) -> list[float]:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return samples


def run() -> list[dict[str, Any]]:
    root = Path(tempfile.mkdtemp(prefix="frognano-bench-"))
    root.chmod(0o755)  # bwrap runs unprivileged and must be able to reach it
    (root / "ws").mkdir()
    config = SandboxConfig(workspace=root / "ws", private_dir=root / "private")
    try:
        with open_sandbox("bubblewrap", config) as sandbox:
            sandbox.run_tool("Bash", {"command": "true"})  # warm caches
            sandboxed = _median_ms(_timed(
                lambda: sandbox.run_tool("Bash", {"command": "true"}), ROUND_TRIPS))
        bare = _median_ms(_timed(
            lambda: subprocess.run(["/bin/bash", "-lc", "true"], check=True), ROUND_TRIPS))
        # The host's login profile can dominate `bash -lc`; the sandbox has none.
        bare_noprofile = _median_ms(_timed(
            lambda: subprocess.run(["/bin/bash", "--noprofile", "--norc", "-c", "true"],
                                   check=True), ROUND_TRIPS))

        def start_and_stop() -> None:
            with open_sandbox("bubblewrap", config):
                pass

        lifecycle = _median_ms(_timed(start_and_stop, STARTS))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    # The honest reference is a bash that, like the sandbox's, reads no profile: the
    # host's login profile alone can make `bash -lc true` 100x slower.
    ratio = sandboxed / bare_noprofile if bare_noprofile else float("inf")
    return [
        {"name": "sandboxed Bash `true` round trip (median)", "value": round(sandboxed, 2),
         "unit": "ms", "target": f"<= {TARGET_MS:g}", "ok": sandboxed <= TARGET_MS},
        {"name": "bare bash -lc true (median)", "value": round(bare, 2), "unit": "ms",
         "target": "reference", "ok": True},
        {"name": "bare bash --noprofile --norc -c true (median)",
         "value": round(bare_noprofile, 2), "unit": "ms", "target": "reference", "ok": True},
        {"name": "sandboxed / bare --noprofile --norc", "value": round(ratio, 2), "unit": "x",
         "target": f"<= {TARGET_RATIO:g}", "ok": ratio <= TARGET_RATIO},
        {"name": "sandbox start + teardown (median)", "value": round(lifecycle, 1),
         "unit": "ms", "target": "report", "ok": True},
    ]


if __name__ == "__main__":
    for row in run():
        mark = "ok " if row["ok"] else "BAD"
        print(f"{mark} {row['name']}: {row['value']} {row['unit']} (target {row['target']})")
