"""Run attack steps in a real bubblewrap sandbox, with the worker as root (this process)
or as a non-root worker (a child process that drops to a leased uid before it builds
the sandbox, the way an unprivileged deployment runs it).

A step is ("Bash", command), ("exec", command), ("setup", command: exec with the setup
phase's network), ("addkey", "session:DATA" or "user:DATA": the worker adds a key to its
own keyring, answering its id) or ("sleep", seconds); each answer comes
back as text (a raised SandboxError reads "RAISED: ..."), with the worker's peak memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sandbox.base import SandboxLimits
from sandbox.uid_pool import UidLease
from tests.support.paths import REPO_ROOT
from tests.support.sandbox_support import make_git_workspace, reachable_dir

REPO = REPO_ROOT
WORKERS = ["root", "non-root"]
# The non-root worker cannot reach a Python under /root: it runs Debian's own.
SYSTEM_PYTHON = "/usr/bin/python3"

WORKER_SCRIPT = r"""
import json, sys, time
from pathlib import Path
from sandbox import SandboxConfig, SandboxLimits, open_sandbox
from sandbox.base import SandboxError
from sandbox.index_endpoint import PackageSources
spec = json.loads(sys.stdin.read())
config = SandboxConfig(workspace=Path(spec["workspace"]), private_dir=Path(spec["private"]),
                       limits=SandboxLimits(**spec["limits"]),
                       egress_allow=tuple(spec.get("egress_allow", ())),
                       egress_hosts=tuple(spec.get("egress_hosts", ())),
                       package_sources=PackageSources(index_url=spec.get("index_url", "")))
answers = []
with open_sandbox("bubblewrap", config) as sb:
    for kind, arg in spec["steps"]:
        try:
            if kind == "Bash":
                answers.append(sb.run_tool("Bash", {"command": arg, "timeout": 60}))
            elif kind in ("exec", "setup"):
                r = sb.exec(arg, timeout=60, network=kind == "setup")
                answers.append(f"exit={r.exit_code}\nSTDOUT:{r.stdout}\nSTDERR:{r.stderr}")
            elif kind == "addkey":  # into the worker's own keyring: "session" or "user"
                import ctypes
                libc = ctypes.CDLL(None, use_errno=True)
                ring = {"session": -3, "user": -4}[arg.split(":")[0]]
                data = arg.split(":", 1)[1].encode()
                key = libc.syscall(248, b"user", b"frognano-test", data, len(data), ring)
                answers.append(str(key))
            else:
                time.sleep(float(arg)); answers.append("")
        except SandboxError as exc:
            answers.append(f"RAISED: {exc}")
# VmHWM, not ru_maxrss: the latter survives exec, so it would report the size of the
# (large) pytest process that spawned this one rather than this worker's own peak.
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
peak = int(hwm.split()[1]) * 1024
print(json.dumps({"answers": answers, "peak_rss": peak}))
"""


@dataclass
class Outcome:
    answers: list[str]
    peak_rss: int  # bytes, of the process that ran the sandbox
    worker_uid: int = 0
    extra: dict[str, str] = field(default_factory=dict)


@contextmanager
def worker_home(worker: str) -> Iterator[tuple[Path, int]]:
    """A run directory and the worker's uid (a leased one, held while the test runs, so
    no sandbox of this host gets it)."""
    lease = UidLease() if worker == "non-root" else None
    uid = lease.uid if lease else os.geteuid()
    try:
        with reachable_dir() as root:
            os.chown(root, uid, uid)
            yield root, uid
    finally:
        if lease:
            lease.release()


def run_steps(worker: str, root: Path, uid: int, steps: list[tuple[str, str]],
              limits: SandboxLimits | None = None, timeout: float = 300,
              egress_allow: tuple[str, ...] = (),
              egress_hosts: tuple[str, ...] = (), index_url: str = "") -> Outcome:
    """`index_url`: the setup phase's package index ("": PyPI)."""
    workspace = root / "ws" if (root / "ws").exists() else make_git_workspace(root)
    spec = {"workspace": str(workspace), "private": str(root / "private"),
            "limits": asdict(limits or SandboxLimits()), "steps": steps,
            "egress_allow": list(egress_allow), "egress_hosts": list(egress_hosts),
            "index_url": index_url}
    if worker == "root":
        python, user = sys.executable, None
    else:
        for path in [workspace, *workspace.rglob("*")]:
            os.lchown(path, uid, uid)
        python, user = SYSTEM_PYTHON, uid
    done = subprocess.run(
        [python, "-c", WORKER_SCRIPT], input=json.dumps(spec), capture_output=True,
        text=True, timeout=timeout, user=user, group=user,
        extra_groups=[] if user is not None else None, cwd="/",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "LANG": "C.UTF-8"})
    if done.returncode != 0:
        raise AssertionError(f"worker failed ({done.returncode}): {done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return Outcome(result["answers"], result["peak_rss"], uid)
