"""Test services' cost (docs/SERVICES.md, "What it costs"): entering a bubblewrap sandbox
without services, with Redis, with PostgreSQL and with both, each time a fresh sandbox
(as every verdict run gets); the servers' memory as the sum of `Pss` over their
processes (`/proc/<pid>/smaps_rollup`: shared pages count once) and their data in the
private area.

    python -m bench.services_cost
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sandbox import SandboxConfig, open_sandbox
from sandbox.services import ServiceSpec

STARTS = 5
CASES: dict[str, tuple[ServiceSpec, ...]] = {
    "none": (),
    "redis": (ServiceSpec("redis"),),
    "postgresql": (ServiceSpec("postgresql"),),
    "both": (ServiceSpec("postgresql"), ServiceSpec("redis")),
}
# Inside the sandbox: the servers' PSS in kB, then the services' data in kB.
MEASURE = ("for p in $(pgrep -u \"$(id -u)\" -f 'postgres|redis-server'); do "
           "awk '/^Pss:/{print $2}' /proc/$p/smaps_rollup; done | awk '{s+=$1} END {print s+0}'"
           "; du -sk /frognano/services | cut -f1")


def _one(services: tuple[ServiceSpec, ...]) -> tuple[float, float, float, str]:
    """Seconds to enter, PSS MB, data MB, and the releases that started."""
    root = Path(tempfile.mkdtemp(prefix="frognano-bench-"))
    root.chmod(0o755)  # bwrap runs unprivileged and must be able to reach it
    try:
        (root / "workspace").mkdir()
        (root / "workspace" / "README").write_text("bench\n")
        (root / "private").mkdir()
        sandbox = open_sandbox("bubblewrap", SandboxConfig(
            workspace=root / "workspace", private_dir=root / "private", services=services))
        started = time.perf_counter()
        sandbox.__enter__()
        entered = time.perf_counter() - started
        try:
            pss = data = 0.0
            if services:
                lines = sandbox.exec(MEASURE).stdout.split()
                pss, data = int(lines[0]) / 1024, int(lines[1]) / 1024
            releases = ", ".join(f"{found.spec.name} {found.version}" for found in
                                 getattr(sandbox, "started_services", ()))
        finally:
            sandbox.__exit__(None, None, None)
        return entered, pss, data, releases
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run() -> list[dict[str, Any]]:
    rows = []
    for name, services in CASES.items():
        samples = [_one(services) for _ in range(STARTS)]
        seconds = [s[0] for s in samples]
        what = f" ({samples[0][3]})" if samples[0][3] else ""
        rows.append({"name": f"enter a sandbox, services: {name}{what} (median of "
                             f"{STARTS}; {min(seconds):.2f}–{max(seconds):.2f} s)",
                     "value": statistics.median(seconds), "unit": "s", "ok": None})
        if services:
            rows.append({"name": f"servers' memory (PSS), {name}",
                         "value": statistics.median(s[1] for s in samples), "unit": "MB",
                         "ok": None})
            rows.append({"name": f"servers' data, {name}",
                         "value": statistics.median(s[2] for s in samples), "unit": "MB",
                         "ok": None})
    return rows


if __name__ == "__main__":
    print(f"load average {os.getloadavg()[0]:.1f}")
    for row in run():
        print(f"{row['name']}: {row['value']:.2f} {row['unit']}")
