"""Setup cache: a second run's setup, and the harness's own share of a whole solve.

A real project vendored as a fixture (more-itertools 11.2.1 with its planted bug,
tests/data/) runs the run path in process: the run directory and workspace
(`open_workspace`), the inferred setup and detected test command, the bubblewrap sandbox
and the harness with a scripted honest fix, against this machine's package index (its
wheels, as tests/reliability/test_real_projects.py serves them), the caches in a fresh
state directory. Three runs, each in a run directory of its own:

1. cold: both caches empty (the venv cache stores its entry);
2. the download cache warm, the venv cache off: what the download cache alone saves,
   and how many of the files pip fetched it served;
3. the venv cache warm: the second setup.

The harness's own share of a run is its wall time minus the setup and the test runs
(the sandbox's own timings of each), over the wall time; the scripted model takes no
time, so what is left is the harness's: git, tree copies, sandbox starts, scans.

    python -m bench setup_cache
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox import SandboxConfig, open_sandbox
from sandbox.index_endpoint import PackageSources
from solver.agent.harness import Harness, RunPlan
from solver.agent.run_events import BaselineDone, Event, SetupDone, TestsJudged
from solver.models.scripted import ScriptedModel, final_answer, think_and_call
from solver.run import open_workspace
from solver.setup.python_setup import infer_python_setup
from solver.verdict.repo_tests import detect_test_command
from tests.support.pip_config import pip_config

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
TARBALL = "more-itertools-11.2.1-planted.tar.gz"
FIX = ("more_itertools/recipes.py", "    return sum(map(pred, iterable)) + 1\n",
       "    return sum(map(pred, iterable))\n")
TARGET_RATIO = 0.20
TARGET_SHARE = 0.10


@dataclass
class Timings:
    """What one run's events said about its phases."""

    setup: float = 0.0
    setup_output: str = ""
    tests: list[float] = field(default_factory=list)

    def emit(self, event: Event) -> None:
        if isinstance(event, SetupDone):
            self.setup = event.result.seconds
            self.setup_output = event.result.stdout + event.result.stderr
        elif isinstance(event, BaselineDone):
            self.tests.append(event.tests.seconds)
        elif isinstance(event, TestsJudged):
            self.tests.append(event.tests.seconds)
            if event.model_tests is not None:
                self.tests.append(event.model_tests.seconds)


@dataclass
class Measured:
    total: float
    timings: Timings
    accepted: bool

    @property
    def harness_share(self) -> float:
        own = self.total - self.timings.setup - sum(self.timings.tests)
        return own / self.total


def local_sources(state: Path, *, venv_cache: bool) -> PackageSources:
    """This machine's pip index (`pip config list`), the caches under `state`."""
    values = pip_config()
    indexes = values.get("index-url", []) + values.get("extra-index-url", [])
    if not indexes:
        raise RuntimeError("pip has no index configured on this machine")
    return PackageSources(indexes[0], tuple(indexes[1:]), tuple(values.get("find-links", [])),
                          cache_dir=state / "package-cache",
                          venv_cache_dir=state / "venv-cache" if venv_cache else None,
                          cache_max_bytes=8 * 1024**3)


def project(root: Path) -> Path:
    source = root / "src"
    source.mkdir()
    subprocess.run(["tar", "-xzf", str(DATA / TARBALL), "-C", str(source),
                    "--strip-components=1"], check=True)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=Bench", "-c", "user.email=b@example.com", "commit", "-qm",
                  "more-itertools with a planted bug"]):
        subprocess.run(["git", *args], cwd=source, check=True, capture_output=True)
    return source


def one_run(source: Path, run_dir: Path, sources: PackageSources) -> Measured:
    """The run path as `solve` takes it, from the run directory to the closed sandbox."""
    started = time.monotonic()
    host = open_workspace(source, None, run_dir)
    inferred = infer_python_setup(host.work_tree)
    detected = detect_test_command(host.work_tree)
    assert inferred is not None and detected is not None
    plan = RunPlan("Wrong result\n\nquantify() counts one too many.", detected.command,
                   setup_command=inferred.command, setup_note=inferred.note)
    path, old, new = FIX
    model = ScriptedModel([think_and_call("The bug is here.", "Edit", file_path=path,
                                          old_string=old, new_string=new),
                           final_answer("Fixed the planted bug.")])
    config = SandboxConfig(workspace=host.work_tree, private_dir=run_dir / "private",
                           package_sources=sources)
    timings = Timings()
    with open_sandbox("bubblewrap", config) as sandbox:
        result = Harness(model, sandbox, host, timings).run(plan)
    return Measured(time.monotonic() - started, timings, result.tests_passed)


def served_from_cache(sources: PackageSources, since: float) -> tuple[int, int]:
    """(files of the download cache used since `since`, files in it)."""
    folder = sources.cache_dir / "sha256" if sources.cache_dir else None
    names = list(folder.iterdir()) if folder and folder.is_dir() else []
    return sum(1 for p in names if p.stat().st_mtime >= since), len(names)


def _row(name: str, value: float, unit: str, target: str = "", ok: bool | None = None
         ) -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "target": target, "ok": ok}


def run() -> list[dict[str, Any]]:
    root = Path(tempfile.mkdtemp(prefix="frognano-bench-setup-"))
    root.chmod(0o755)  # the sandbox uid binds the workspace below it
    state = Path(tempfile.mkdtemp(prefix="frognano-bench-state-"))  # host-only, 0700
    try:
        source = project(root)
        cold = one_run(source, root / "run-1", local_sources(state, venv_cache=True))
        marked = time.time() - 1
        downloads = one_run(source, root / "run-2", local_sources(state, venv_cache=False))
        hits, files = served_from_cache(local_sources(state, venv_cache=False), marked)
        warm = one_run(source, root / "run-3", local_sources(state, venv_cache=True))
    finally:
        subprocess.run(["rm", "-rf", str(root), str(state)], check=False)
    ratio = warm.timings.setup / cold.timings.setup
    rows = [
        _row("first setup (cold caches: venv made, packages fetched, installed)",
             cold.timings.setup, "s"),
        _row("second setup, download cache only (venv cache off)", downloads.timings.setup,
             "s", "reference"),
        _row("files the download cache served in that run / files in it", hits / max(files, 1),
             f"({hits} of {files})", "1.0", hits == files and files > 0),
        _row("second setup, venv cache", warm.timings.setup, "s"),
        _row("second ÷ first setup", ratio, "×", f"≤ {TARGET_RATIO}", ratio <= TARGET_RATIO),
    ]
    for label, measured in (("cold", cold), ("download cache", downloads),
                            ("venv cache", warm)):
        rows += [_row(f"{label} run: whole run (open_workspace to closed sandbox)",
                      measured.total, "s", "", measured.accepted),
                 _row(f"{label} run: test runs ({len(measured.timings.tests)})",
                      sum(measured.timings.tests), "s"),
                 _row(f"{label} run: harness's own share (wall − setup − tests) / wall",
                      measured.harness_share, "", f"≤ {TARGET_SHARE}",
                      measured.harness_share <= TARGET_SHARE)]
    return rows


if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", "200")
    for found in run():
        print(found)
