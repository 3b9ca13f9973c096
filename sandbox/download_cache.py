"""The index endpoint's files on the host's disk (sandbox/index_endpoint.py): the download
cache that runs share, the spool that holds what it may not keep, and each setup's budget
of bytes fetched.

Code that runs during setup (a repository's setup.py, any sdist's build) can ask the
endpoint for every file its pages link and throw the bytes away; each lands on the host,
outside the sandbox's disk quota. So:
- a setup may fetch at most `FetchBudget.limit` bytes through the endpoint (the sandbox's
  disk quota unless FROGNANO_SETUP_FETCH_MAX_GB says otherwise; cache hits count too):
  past it every file is refused, and the refusal is a line of the run's NetworkLog;
- the cap both setup caches share (FROGNANO_SETUP_CACHE_MAX_GB: these files and the venv
  cache's entries, solver/setup/venv_cache.py) holds while storing: a file goes in only
  once the least recently used entries not in use made room for it, else it is served
  from the spool and not kept;
- the spool (files without a sha256, and those the cache has no room for) is a private
  directory of the endpoint's, under the cache (never the host's shared /tmp), at most
  SPOOL_MAX_FILES files at once, each removed once sent; its bytes are the budget's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.trees import remove_tree

if TYPE_CHECKING:
    from sandbox.index_endpoint import PackageSources

IN_USE_SECONDS = 600.0  # an entry used this recently is never evicted: a run may copy it
VENV_ENTRIES = "entries"  # the venv cache's entries (solver/setup/venv_cache.py)
HASHED = "sha256"
SPOOLS = "spool"
LOCK_NAME = ".lock"
SPOOL_MAX_FILES = 8  # pip fetches one file at a time; a setup's own code may ask for more
SPOOL_WAIT_SECONDS = 30.0
STALE_SPOOL_SECONDS = 86_400.0  # a spool its endpoint never removed (a killed worker)


class SpoolFull(Exception):
    """The spool holds SPOOL_MAX_FILES files, and none left in time."""


class FetchBudget:
    """The bytes one setup may fetch through the endpoint; `charge` says whether `size`
    more still fit (once past, every later charge fails too)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0
        self._lock = threading.Lock()

    def charge(self, size: int) -> bool:
        with self._lock:
            if self.used + size > self.limit:
                self.used = self.limit + 1
                return False
            self.used += size
            return True


@dataclass(frozen=True)
class CacheEntry:
    path: Path
    last_used: float
    size: int


def cache_entries(sources: PackageSources) -> list[CacheEntry]:
    """Both caches' entries: the download cache's files, the venv cache's entries."""
    found: list[CacheEntry] = []
    if sources.cache_dir is not None and (sources.cache_dir / HASHED).is_dir():
        with os.scandir(sources.cache_dir / HASHED) as files:
            for item in files:
                with contextlib.suppress(OSError):
                    info = item.stat(follow_symlinks=False)
                    found.append(CacheEntry(Path(item.path), info.st_mtime,
                                            info.st_blocks * 512))
    entries = sources.venv_cache_dir / VENV_ENTRIES if sources.venv_cache_dir else None
    if entries is not None and entries.is_dir():
        with os.scandir(entries) as items:
            for item in items:
                if item.name.startswith("."):  # one being written, or being removed
                    continue
                with contextlib.suppress(OSError, ValueError):
                    meta = json.loads((Path(item.path) / "meta.json").read_text())
                    found.append(CacheEntry(Path(item.path),
                                            item.stat(follow_symlinks=False).st_mtime,
                                            int(meta["bytes"])))
    return found


def evict(sources: PackageSources, *, keep: Path | None = None, now: float | None = None,
          room: int = 0) -> list[Path]:
    """Cut both caches to `cache_max_bytes` less `room` (0: no cap), least recently used
    first, sparing `keep` and whatever was used in the last IN_USE_SECONDS. What went."""
    if not sources.cache_max_bytes:
        return []
    entries = cache_entries(sources)
    total = sum(entry.size for entry in entries) + room
    now = time.time() if now is None else now
    removed: list[Path] = []
    for entry in sorted(entries, key=lambda e: e.last_used):
        if total <= sources.cache_max_bytes:
            break
        if entry.path == keep or now - entry.last_used < IN_USE_SECONDS:
            continue
        with contextlib.suppress(OSError):
            if entry.path.is_dir():
                # Out of the entries first, so no run starts copying half of it.
                gone = entry.path.with_name(f".old-{entry.path.name}")
                os.rename(entry.path, gone)
                remove_tree(gone)
            else:
                os.unlink(entry.path)
            total -= entry.size
            removed.append(entry.path)
    return removed


def cache_bytes(sources: PackageSources) -> int:
    return sum(entry.size for entry in cache_entries(sources))


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One store at a time across the host's endpoints (the cap's sum, then the rename)."""
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class DownloadCache:
    """One endpoint's files: hits from the shared cache, new files in its own spool
    (`spool_file`, then `store` or `release`)."""

    def __init__(self, sources: PackageSources) -> None:
        self.sources = sources
        parent = sources.cache_dir / SPOOLS if sources.cache_dir is not None else None
        if parent is not None:
            parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _remove_stale(parent)
        self.spool = Path(tempfile.mkdtemp(prefix="spool-", dir=parent))
        self._slots = threading.BoundedSemaphore(SPOOL_MAX_FILES)

    def hit(self, sha256: str) -> Path | None:
        """The cached file holding `sha256`, its last use marked; None when none."""
        if self.sources.cache_dir is None or not sha256:
            return None
        cached = self.sources.cache_dir / HASHED / sha256
        if not cached.is_file():
            return None
        with contextlib.suppress(OSError):  # its last use: the cap evicts the oldest
            os.utime(cached)
        return cached

    def spool_file(self) -> Path:
        """A new empty file in the spool, one of its SPOOL_MAX_FILES slots taken until
        `store` or `release`; SpoolFull when no slot freed in SPOOL_WAIT_SECONDS."""
        if not self._slots.acquire(timeout=SPOOL_WAIT_SECONDS):
            raise SpoolFull(f"the index endpoint's spool holds {SPOOL_MAX_FILES} files")
        try:
            fd, name = tempfile.mkstemp(prefix=".part-", dir=self.spool)
        except BaseException:
            self._slots.release()
            raise
        os.close(fd)
        return Path(name)

    def release(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            os.unlink(path)
        self._slots.release()

    def store(self, part: Path, sha256: str) -> Path | None:
        """`part` (whole, its sha256 checked) moved into the cache when the cap leaves it
        room, once the least recently used entries not in use made it: the cached path.
        None when there is no cache or no room (`part` stays the caller's)."""
        cache = self.sources.cache_dir
        if cache is None:
            return None
        size = os.stat(part).st_blocks * 512
        cap = self.sources.cache_max_bytes
        if cap and size > cap:
            return None
        (cache / HASHED).mkdir(mode=0o700, parents=True, exist_ok=True)
        with _locked(cache):
            if cap:
                evict(self.sources, room=size)
                if cache_bytes(self.sources) + size > cap:
                    return None
            cached = cache / HASHED / sha256
            os.replace(part, cached)  # whole, and checked, before anyone reads it
        self._slots.release()
        return cached

    def close(self) -> None:
        remove_tree(self.spool)


def _remove_stale(parent: Path) -> None:
    """Spools no endpoint removed (its worker killed), left for a day."""
    now = time.time()
    with contextlib.suppress(OSError), os.scandir(parent) as items:
        for item in items:
            with contextlib.suppress(OSError):
                if now - item.stat(follow_symlinks=False).st_mtime > STALE_SPOOL_SECONDS:
                    remove_tree(Path(item.path))
