"""Setup with uv: the inferred setup's first run with uv beside pip's, and its second run.

Three real projects vendored as fixtures (tests/data/: toml with its tox deps, numpy among
them; python-slugify with its dependency; inflect, built with setuptools-scm, with its
three), each set up
as a run's setup phase does it (solver/agent/harness.py `_setup`): the run directory and
workspace (`open_workspace`), the inferred setup for the installer, the bubblewrap sandbox
with uv's binary bound, the setup cache around the command (`venv_cache.for_run`), against
this machine's package index. Per project, in one run, each in a state directory of its own:

1. the first setup with pip (both caches empty);
2. the first setup with uv (both caches empty; pip's fallback must not have run);
3. the second setup with uv (the same state: the venv cache's entry).

pip and uv alternate which goes first from one project to the next, so neither always finds
the disk's page cache warm. Seconds are the setup's as the run records them (the sandbox's
timing of the command, or of the cache's restore).

    python -m bench setup_installer
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.setup_cache import DATA, local_sources
from sandbox import SandboxConfig, open_sandbox
from sandbox.base import ExecResult
from sandbox.index_endpoint import PackageSources
from solver.run import open_workspace
from solver.setup import venv_cache
from solver.setup.installer import fell_back, uv_binary, with_installer
from solver.setup.python_setup import infer_python_setup

PROJECTS = {"toml": "toml-0.10.2-planted.tar.gz",
            "python-slugify": "python-slugify-9.2.0-planted.tar.gz",
            "inflect": "inflect-7.5.0-planted.tar.gz"}
TARGET_FIRST = 0.30  # uv's first setup ÷ pip's
TARGET_SECOND = 0.20  # the second setup ÷ the first (uv's)


@dataclass
class Setup:
    seconds: float
    ok: bool  # it succeeded, and uv's did without pip's fallback
    command: str


def project(root: Path, tarball: str) -> Path:
    source = root / "src"
    source.mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(DATA / tarball), "-C", str(source),
                    "--strip-components=1"], check=True)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=Bench", "-c", "user.email=b@example.com", "commit", "-qm",
                  "the project"]):
        subprocess.run(["git", *args], cwd=source, check=True, capture_output=True)
    return source


def one_setup(source: Path, run_dir: Path, sources: PackageSources, installer: str) -> Setup:
    """The setup phase as the harness runs it: a cache hit restores, a miss runs the
    command in the sandbox's network phase and stores what it made."""
    host = open_workspace(source, None, run_dir)
    inferred = infer_python_setup(host.work_tree)
    assert inferred is not None
    command = with_installer(inferred, installer).command
    tools = tuple(found for found in (uv_binary(),) if found is not None)
    config = SandboxConfig(workspace=host.work_tree, private_dir=run_dir / "private",
                           package_sources=sources, setup_tools=tools)
    with open_sandbox("bubblewrap", config) as sandbox:
        cache = venv_cache.for_run(sandbox, host, command)
        result: ExecResult | None = cache.restore() if cache is not None else None
        result = result or sandbox.exec(command, network=True, timeout=900)
        if cache is not None and result.ok:
            result = cache.store(result)
    used_pip = installer == "uv" and fell_back(result.stdout)
    return Setup(result.seconds, result.ok and not used_pip, command)


def _row(name: str, value: float, unit: str, target: str = "", ok: bool | None = None
         ) -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "target": target, "ok": ok}


def measure(name: str, tarball: str, root: Path, pip_first: bool) -> dict[str, Setup]:
    """pip's and uv's first setups (each with empty caches), then uv's second."""
    source = project(root / name, tarball)
    found: dict[str, Setup] = {}
    for installer in ("pip", "uv") if pip_first else ("uv", "pip"):
        state = Path(tempfile.mkdtemp(prefix=f"frognano-bench-{installer}-"))
        try:
            sources = local_sources(state, venv_cache=True)
            found[installer] = one_setup(source, root / name / f"{installer}-1", sources,
                                         installer)
            if installer == "uv":
                found["uv again"] = one_setup(source, root / name / "uv-2", sources, "uv")
        finally:
            subprocess.run(["rm", "-rf", str(state)], check=False)
    return found


def run() -> list[dict[str, Any]]:
    if uv_binary() is None:
        raise RuntimeError("uv is not installed (pip install uv: a product dependency)")
    root = Path(tempfile.mkdtemp(prefix="frognano-bench-installer-"))
    root.chmod(0o755)  # the sandbox uid binds the workspaces below it
    rows, firsts, seconds = [], {"pip": 0.0, "uv": 0.0}, 0.0
    try:
        for index, (name, tarball) in enumerate(PROJECTS.items()):
            found = measure(name, tarball, root, pip_first=index % 2 == 0)
            pip, uv, again = found["pip"], found["uv"], found["uv again"]
            firsts["pip"] += pip.seconds
            firsts["uv"] += uv.seconds
            seconds += again.seconds
            first_ratio, second_ratio = uv.seconds / pip.seconds, again.seconds / uv.seconds
            rows += [
                _row(f"{name}: first setup with pip", pip.seconds, "s", "reference", pip.ok),
                _row(f"{name}: first setup with uv", uv.seconds, "s", "", uv.ok),
                _row(f"{name}: uv ÷ pip, first setup", first_ratio, "×", f"≤ {TARGET_FIRST}",
                     first_ratio <= TARGET_FIRST),
                _row(f"{name}: second setup (uv, venv cache)", again.seconds, "s", "",
                     again.ok),
                _row(f"{name}: second ÷ first setup", second_ratio, "×",
                     f"≤ {TARGET_SECOND}", second_ratio <= TARGET_SECOND)]
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)
    total_first, total_second = firsts["uv"] / firsts["pip"], seconds / firsts["uv"]
    return [*rows,
            _row("three projects: uv ÷ pip, first setups", total_first, "×",
                 f"≤ {TARGET_FIRST}", total_first <= TARGET_FIRST),
            _row("three projects: second ÷ first setups (uv)", total_second, "×",
                 f"≤ {TARGET_SECOND}", total_second <= TARGET_SECOND)]


if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", "200")
    for found in run():
        print(found)
