"""A uid of its own for every concurrent sandbox, when the worker runs as root.

RLIMIT_NPROC counts the processes of a real uid across the whole host: if every
sandbox ran as one shared uid, a fork bomb in one run would stop every other
sandbox on the host from even starting (seen: "bwrap: Creating new namespace
failed: Resource temporarily unavailable"), and N runs would share one limit.
Leases are `flock`s on files under /run, so they end with the process that held
them, however it ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
from pathlib import Path

POOL_BASE = 1_300_000  # far above any distribution's user and subordinate-id ranges
POOL_SIZE = 4096
LEASE_DIR = Path("/run/frognano-uids")


class UidPoolExhausted(RuntimeError):
    pass


class UidLease:
    """Holds one uid of the pool until `release()` (or process exit)."""

    def __init__(self, lease_dir: Path = LEASE_DIR, base: int = POOL_BASE,
                 size: int = POOL_SIZE) -> None:
        lease_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        start = random.randrange(size)  # spread concurrent workers over the pool
        for offset in range(size):
            uid = base + (start + offset) % size
            fd = os.open(lease_dir / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            return
        raise UidPoolExhausted(f"all {size} sandbox uids from {base} are in use")

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


def passwd_lines(uid: int, gid: int, home: str) -> tuple[str, str]:
    """/etc/passwd and /etc/group for inside the sandbox: tools that look the user up
    (getpass, ssh, some test suites) find one."""
    passwd = (f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
              f"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
              f"sandbox:x:{uid}:{gid}:sandbox:{home}:/bin/bash\n")
    group = f"root:x:0:\nnogroup:x:65534:\nsandbox:x:{gid}:\n"
    return passwd, group
