"""cgroup v2 limits for a whole sandbox, where the host offers them.

With a cgroup of its own, memory.max, memory.swap.max and pids.max bind the sandbox as a
whole, tmpfs and shared memory included, and the kernel enforces them. That needs a
writable cgroup v2 tree with the memory and pids controllers: the root of a pure v2
hierarchy when the worker runs as root, or a delegated subtree named by
FROGNANO_SANDBOX_CGROUP (e.g. systemd's `Delegate=yes`, the directory holding no process
itself, with `+memory +pids` in its cgroup.subtree_control). Elsewhere (cgroup v1 hosts,
unprivileged workers without delegation) `available()` says why not, and the host-side
watch of sandbox/usage_watch.py stands in.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT_NAME = "frognano-sandboxes"
ENV_PARENT = "FROGNANO_SANDBOX_CGROUP"
NEEDED = {"memory", "pids"}


def _controllers(path: Path, name: str) -> set[str]:
    try:
        return set((path / name).read_text().split())
    except OSError:
        return set()


def available() -> tuple[Path | None, str]:
    """(the cgroup to create sandboxes under, or None; a sentence saying which and why)."""
    delegated = os.environ.get(ENV_PARENT)
    if delegated:
        parent = Path(delegated)
        if _controllers(parent, "cgroup.subtree_control") >= NEEDED and os.access(
                parent, os.W_OK):
            return parent, f"cgroup v2 (delegated {parent})"
        return None, (f"{ENV_PARENT}={parent} is not a writable cgroup v2 directory with "
                      "+memory +pids in its cgroup.subtree_control")
    if not (CGROUP_ROOT / "cgroup.controllers").exists():
        return None, f"{CGROUP_ROOT} is not a cgroup v2 hierarchy (cgroup v1 or hybrid)"
    if not _controllers(CGROUP_ROOT, "cgroup.controllers") >= NEEDED:
        return None, f"cgroup v2 at {CGROUP_ROOT} lacks the memory or pids controller"
    if os.geteuid() != 0:
        return None, (f"the worker is not root and {ENV_PARENT} names no delegated cgroup")
    parent = CGROUP_ROOT / PARENT_NAME
    try:
        (CGROUP_ROOT / "cgroup.subtree_control").write_text("+memory +pids")
        parent.mkdir(exist_ok=True)
        (parent / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError as exc:
        return None, f"cannot set up {parent}: {exc}"
    return parent, f"cgroup v2 ({parent})"


class SandboxCgroup:
    """One sandbox's cgroup; processes join it through `procs_fd` before they exec."""

    def __init__(self, parent: Path, *, memory_bytes: int, max_processes: int) -> None:
        self.path = parent / f"sandbox-{os.getpid()}-{secrets.token_hex(4)}"
        self.path.mkdir()
        try:
            (self.path / "memory.max").write_text(str(memory_bytes))
            if (self.path / "memory.swap.max").exists():
                (self.path / "memory.swap.max").write_text("0")
            (self.path / "pids.max").write_text(str(max_processes))
            self.procs_fd = os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            self.path.rmdir()
            raise

    def join(self) -> None:
        """In a child before exec: move the calling process (and what it starts) in."""
        os.write(self.procs_fd, b"0")

    def oom_kills(self) -> int:
        with contextlib.suppress(OSError, ValueError):
            for line in (self.path / "memory.events").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.procs_fd)
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        for _ in range(50):  # rmdir succeeds once the last process has exited
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)
