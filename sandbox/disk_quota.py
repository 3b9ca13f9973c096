"""A disk quota for the workspace and the private dir, which live on the host's disk.

RLIMIT_FSIZE caps one file, not how many: without privileges there is no real quota
(no project quotas, no loop mounts), so a watchdog measures the trees while a command
runs and kills the sandbox's runner once they pass the limit. What can still be written
past the limit is bounded by the poll interval times the disk's write speed. Files
deleted while still open hold their blocks and are in no tree: `extra` adds them
(sandbox/usage_watch.py finds them through the sandbox's processes' /proc/<pid>/fd).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

MIN_POLL_SECONDS = 0.2
# A walk may take at most this share of the wall time (big repositories walk slowly).
WALK_SHARE = 0.1


MAX_DEPTH = 256  # a deeper tree counts as over any quota (no repository nests so deep)
BLOCK_BYTES = 4096  # what an inode costs at least: empty files are not free
UNBOUNDED = 2**62  # too deep to measure: over any limit
TOO_SLOW = UNBOUNDED + 1  # a walk past WALK_MAX_SECONDS: over any limit too
# A tree one walk cannot measure in this time (millions of entries; 100,000 take about
# a second) counts as over the quota: polls a minute apart would let the sandbox write on.
WALK_MAX_SECONDS = 30.0
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def tree_bytes(roots: Iterable[Path], max_depth: int = MAX_DEPTH, *,
               stop_above: int | None = None,
               max_seconds: float | None = None) -> int:
    """Bytes on disk under `roots`, every entry at least one block (so millions of empty
    files count too) and a file at least its size: the host writes a sparse file's holes
    out whole (git stores the zeros, the verdict's checkout writes them back), and
    `truncate` makes thousands of 1 GiB files between two polls. Symlinks are not
    followed, unreadable directories count as empty.

    The walk opens each directory relative to its parent's descriptor, so a path longer
    than PATH_MAX (deep nesting) cannot hide a file from it. A tree nested deeper than
    `max_depth` has no honest use and would need a descriptor per level: it counts as
    `UNBOUNDED`, over any limit; one that takes longer than `max_seconds` to walk
    (WALK_MAX_SECONDS unless given) counts
    as `TOO_SLOW`. Once the total passes `stop_above` the walk stops there (it is over
    the limit already), so its length is bounded by the quota itself.
    """
    total, count = 0, 0
    deadline = time.monotonic() + (WALK_MAX_SECONDS if max_seconds is None else max_seconds)
    for root in roots:
        try:
            top = os.open(root, _DIR)
        except OSError:
            continue
        stack = [(top, os.scandir(top))]
        try:
            while stack:
                fd, entries = stack[-1]
                entry = next(entries, None)
                if entry is None:
                    stack.pop()
                    entries.close()
                    os.close(fd)
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += max(info.st_blocks * 512, info.st_size, BLOCK_BYTES)
                count += 1
                if stop_above is not None and total > stop_above:
                    return total
                if count % 4096 == 0 and time.monotonic() > deadline:
                    return TOO_SLOW
                if not stat.S_ISDIR(info.st_mode):
                    continue
                if len(stack) >= max_depth:
                    return UNBOUNDED
                child = _open_dir(entry.name, fd)
                if child is not None:
                    stack.append(child)
        finally:
            for fd, entries in stack:
                entries.close()
                os.close(fd)
    return total


def _open_dir(name: str, parent: int) -> tuple[int, os._ScandirIterator[str]] | None:
    """`name` under the directory `parent` as a descriptor and its entries, not following
    a symlink; None when it cannot be opened (it then counts as empty)."""
    try:
        child = os.open(name, _DIR, dir_fd=parent)
    except OSError:
        return None
    try:
        return child, os.scandir(child)
    except OSError:
        os.close(child)
        return None


class DiskQuotaExceeded(Exception):
    pass


class DiskWatch:
    """While active, calls `on_exceeded` once the trees pass `limit_bytes`."""

    def __init__(self, roots: list[Path], limit_bytes: int,
                 on_exceeded: Callable[[], None],
                 extra: Callable[[], int] | None = None) -> None:
        self.roots, self.limit_bytes, self.on_exceeded = roots, limit_bytes, on_exceeded
        self.extra = extra
        self.exceeded_at: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="disk-watch")

    def _measure(self) -> float:
        started = time.monotonic()
        used = tree_bytes(self.roots, stop_above=self.limit_bytes)
        used += self.extra() if self.extra and used <= self.limit_bytes else 0
        if used > self.limit_bytes and self.exceeded_at is None:
            self.exceeded_at = used
            self.on_exceeded()
        return time.monotonic() - started

    def _watch(self) -> None:
        interval = MIN_POLL_SECONDS
        while not self._stop.wait(interval) and self.exceeded_at is None:
            interval = max(MIN_POLL_SECONDS, self._measure() / WALK_SHARE)

    def __enter__(self) -> DiskWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        if self.exceeded_at is None:
            self._measure()  # what the last poll missed

    def check(self) -> None:
        if self.exceeded_at is not None and self.exceeded_at >= TOO_SLOW:
            raise DiskQuotaExceeded(
                f"disk_quota: the workspace and the sandbox's private files hold so many "
                f"entries that one walk took over {WALK_MAX_SECONDS:g} s, which the disk "
                "quota cannot measure; the command was killed")
        if self.exceeded_at is not None and self.exceeded_at >= UNBOUNDED:
            raise DiskQuotaExceeded(
                f"disk_quota: the workspace nests directories deeper than {MAX_DEPTH} "
                "levels, which the disk quota cannot measure; the command was killed")
        if self.exceeded_at is not None:
            raise DiskQuotaExceeded(
                f"disk_quota: the workspace and the sandbox's private files (deleted but "
                f"still open ones included) use "
                f"{self.exceeded_at / 1024**2:.0f} MiB, over the limit of "
                f"{self.limit_bytes / 1024**2:.0f} MiB; the command was killed")
