"""Helpers for the sandbox tests: workspaces the unprivileged sandbox uid can reach."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sandbox import SandboxConfig, SandboxLimits, open_sandbox
from sandbox.base import Sandbox

HAVE_BWRAP = shutil.which("bwrap") is not None
BACKENDS = ["unsafe-local", "bubblewrap"] if HAVE_BWRAP else ["unsafe-local"]


@contextmanager
def reachable_dir() -> Iterator[Path]:
    """A temp dir with o+x parents: pytest's tmp_path lies under a root-only directory,
    which bubblewrap running as nobody cannot bind."""
    root = Path(tempfile.mkdtemp(prefix="frognano-sbx-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def make_git_workspace(root: Path) -> Path:
    workspace = root / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("hello\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@e", *args],
                       cwd=workspace, check=True, capture_output=True)
    return workspace


@contextmanager
def running_sandbox(backend: str, limits: SandboxLimits | None = None) -> Iterator[Sandbox]:
    with reachable_dir() as root:
        config = SandboxConfig(workspace=make_git_workspace(root), private_dir=root / "private",
                               limits=limits or SandboxLimits())
        with open_sandbox(backend, config) as sandbox:
            yield sandbox


def host_pids_with(needle: str) -> list[int]:
    """Host processes whose command line contains `needle`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if needle in cmdline:
                found.append(int(entry.name))
    return found


def wait_gone(needle: str, timeout: float = 5.0) -> list[str]:
    """Host processes matching `needle` still alive after `timeout` seconds, described
    with their state and owner; a SIGKILLed process may take a moment to finish exiting."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in host_pids_with(needle):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            state = fields.get("State", "?").strip()
            if state.startswith(("Z", "X")):
                continue  # exited; only its parent's wait() is pending
            alive.append(f"{pid} state={state} uid={fields.get('Uid', '?').split()[0]} "
                         f"ppid={fields.get('PPid', '?').strip()}")
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)
