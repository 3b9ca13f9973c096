"""Helpers for the sandbox tests: workspaces the unprivileged sandbox uid can reach."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sandbox import SandboxConfig, SandboxLimits, open_sandbox
from sandbox.base import Sandbox
from solver.hostgit import HostRepo
from tests.conftest import make_repo

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


def make_host_repo(root: Path, files: dict[str, str] | None = None,
                   template: str | None = None) -> HostRepo:
    """A run as the worker prepares it: the host's own git dir `root/git` and the
    workspace `root/ws` (with the sandbox's own `.git`), from a source repository."""
    source = make_repo(root / "src", files if files or template else {"README.md": "hello\n"},
                       template=template)
    return HostRepo.create(source, "main", root / "git", root / "ws")


def make_git_workspace(root: Path) -> Path:
    return make_host_repo(root).work_tree


def host_repo(sandbox: Sandbox) -> HostRepo:
    """The host repository of a sandbox whose workspace came from `make_host_repo`."""
    workspace: Path = sandbox.config.workspace  # type: ignore[attr-defined]
    return HostRepo.open(workspace.parent / "git", workspace)


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
