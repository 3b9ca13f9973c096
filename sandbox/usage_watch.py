"""What a whole sandbox holds, measured from the host through /proc, and a watch on it.

RLIMIT_AS and RLIMIT_NPROC bind one process (or one uid) each: four processes of 300 MiB
each pass a 300 MiB RLIMIT_AS, and a tmpfs or a deleted-but-open file belongs to no
process at all. Without cgroup v2 (sandbox/cgroup.py) the host sums, over every process
of the sandbox (all of them descend from the bwrap process the host started):

- memory: proportional anonymous, shared-memory and swapped pages (smaps_rollup), plus
  what the sandbox's own tmpfs mounts hold (/tmp, /dev/shm) and memfd files kept open;
- processes: threads included, as the kernel counts them for RLIMIT_NPROC;
- disk held by deleted-but-open files on the workspace's file systems (for disk_quota.py).

and kills the sandbox once a limit is passed. What can be allocated past the limit is
bounded by the poll interval times the allocation speed. SysV shared memory that no
process maps any more is not seen here (only a cgroup charges it).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MIN_POLL_SECONDS = 0.1
SCAN_SHARE = 0.05  # a scan may take at most this share of the wall time
ROLLUP_FIELDS = (b"Pss_Anon:", b"Pss_Shmem:", b"SwapPss:")


def _ppid(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return -1
    return int(raw[raw.rfind(b")") + 2:].split()[1])


def descendants(root: int) -> list[int]:
    """`root` and every process below it (orphans in its pid namespace are reparented
    to the namespace's init, itself below `root`)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            children.setdefault(_ppid(entry), []).append(int(entry))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


def _process_memory(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            lines = handle.read().splitlines()
        return sum(int(line.split()[1]) * 1024 for line in lines
                   if line.startswith(ROLLUP_FIELDS))
    except (OSError, IndexError, ValueError):
        pass
    try:  # no smaps_rollup (old kernel, or not ours to read): resident, shared counted twice
        with open(f"/proc/{pid}/status", "rb") as handle:
            lines = handle.read().splitlines()
        return sum(int(line.split()[1]) * 1024 for line in lines
                   if line.startswith((b"RssAnon:", b"RssShmem:", b"VmSwap:")))
    except (OSError, IndexError, ValueError):
        return 0


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def _tmpfs_bytes(pid: int, mounts: Iterable[str]) -> int:
    total = 0
    for mount in mounts:
        try:
            info = os.statvfs(f"/proc/{pid}/root{mount}")
        except OSError:
            continue
        total += (info.f_blocks - info.f_bfree) * info.f_frsize
    return total


@dataclass
class Usage:
    memory_bytes: int = 0
    processes: int = 0
    deleted_disk_bytes: int = 0  # deleted-but-open files on the watched devices


def measure(root: int, *, tmpfs: Iterable[str] = (), disk_devices: Iterable[int] = (),
            count_memory: bool = True) -> Usage:
    """What the sandbox under host pid `root` holds now (root itself, bwrap's monitor on
    the host, holds nothing of the sandbox's and is not counted)."""
    pids = [pid for pid in descendants(root) if pid != root]
    devices = set(disk_devices)
    usage = Usage(processes=sum(_threads(pid) for pid in pids))
    seen: set[tuple[int, int]] = set()
    memfd_bytes = 0
    for pid in pids:
        if count_memory:
            usage.memory_bytes += _process_memory(pid)
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(path)
                if not target.endswith(" (deleted)"):
                    continue
                info = os.stat(path)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            if info.st_dev in devices:
                usage.deleted_disk_bytes += info.st_blocks * 512
            elif target.startswith("/memfd:"):
                memfd_bytes += info.st_blocks * 512
    if count_memory and pids:
        usage.memory_bytes += memfd_bytes + _tmpfs_bytes(pids[0], tmpfs)
    return usage


class LimitExceeded(Exception):
    pass


class UsageWatch:
    """While active, kills the sandbox (`on_exceeded`) once its memory or its process
    count passes the limit; `reason` then says which and by how much."""

    def __init__(self, root: int, *, memory_limit: int | None, process_limit: int | None,
                 tmpfs: Iterable[str], on_exceeded: Callable[[], None]) -> None:
        self.root, self.tmpfs = root, list(tmpfs)
        self.memory_limit, self.process_limit = memory_limit, process_limit
        self.on_exceeded = on_exceeded
        self.reason: str | None = None
        self.peak = Usage()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="usage-watch")

    def _measure(self) -> float:
        started = time.monotonic()
        usage = measure(self.root, tmpfs=self.tmpfs, count_memory=self.memory_limit is not None)
        self.peak.memory_bytes = max(self.peak.memory_bytes, usage.memory_bytes)
        self.peak.processes = max(self.peak.processes, usage.processes)
        if self.memory_limit is not None and usage.memory_bytes > self.memory_limit:
            self.reason = (f"memory_limit: the sandbox's processes, /tmp and /dev/shm held "
                           f"{usage.memory_bytes / 1024**2:.0f} MiB, over the limit of "
                           f"{self.memory_limit / 1024**2:.0f} MiB for the whole sandbox")
        elif self.process_limit is not None and usage.processes > self.process_limit:
            self.reason = (f"process_limit: the sandbox ran {usage.processes} processes "
                           f"and threads, over the limit of {self.process_limit}")
        if self.reason is not None:
            self.on_exceeded()
        return time.monotonic() - started

    def _watch(self) -> None:
        interval = MIN_POLL_SECONDS
        while not self._stop.wait(interval) and self.reason is None:
            interval = max(MIN_POLL_SECONDS, self._measure() / SCAN_SHARE)

    def __enter__(self) -> UsageWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def failure(self) -> str | None:
        """Why the sandbox was killed, for the caller's tool result or ExecResult."""
        if self.reason is None:
            return None
        return f"{self.reason}; every process in it was killed and the sandbox restarted"
