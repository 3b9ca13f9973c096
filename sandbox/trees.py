"""Removing a tree the sandbox wrote, however deep: the host's cleanup of a run directory.

`shutil.rmtree` recurses once per directory level: the sandbox can nest a few thousand
directories in a second (`mkdir -p` one level at a time), and rmtree then raises
RecursionError even with `ignore_errors=True`, leaving the run directory on the host's
disk and the exception in the caller's `finally`. This walk keeps one open descriptor
and a list of names, never follows a symlink (it unlinks it), and goes back up through
`..` of the directory it holds. Call it once nothing in the sandbox can still write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: Path | str) -> None:
    """Remove `path` and everything below it; errors on single entries are skipped."""
    try:
        fd = _open_dir(path, None)
    except FileNotFoundError:
        return
    except OSError:  # a link or a file: remove the name itself, never what it points to
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    names: list[str] = []  # from `path` down to the directory `fd` holds
    pending: list[list[str]] = [[]]  # per level: subdirectories still to remove
    # Per level: its last scan filled a batch, and a subdirectory went since: scan again
    # (a batch it cannot remove must not be scanned for ever).
    full: list[bool] = [False]
    progress: list[bool] = [False]
    fresh = True
    try:
        while True:
            if fresh:
                pending[-1] = _empty_but_subdirs(fd)
                full[-1], progress[-1] = len(pending[-1]) >= SUBDIR_BATCH, False
            if not pending[-1] and full[-1] and progress[-1]:
                fresh = True
                continue
            if pending[-1]:
                name = pending[-1].pop()
                try:
                    child = _open_dir(name, fd)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=fd)
                    fresh = False
                    continue
                os.close(fd)
                fd = child
                names.append(name)
                pending.append([])
                full.append(False)
                progress.append(False)
                fresh = True
                continue
            pending.pop()
            full.pop()
            progress.pop()
            if not names:
                break
            parent = os.open("..", _DIR, dir_fd=fd)
            os.close(fd)
            fd = parent
            with contextlib.suppress(OSError):
                os.rmdir(names.pop(), dir_fd=fd)
                progress[-1] = True
            fresh = False
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _open_dir(name: Path | str, dir_fd: int | None) -> int:
    """A directory to empty, made readable, enterable and writable for us first: the
    sandbox may `chmod 000` its own directories, and a worker that is not root runs it
    under its own uid, so without this the tree stays on the host's disk."""
    try:
        fd = os.open(name, _DIR, dir_fd=dir_fd)
    except PermissionError:
        # O_PATH needs no permission on the directory itself, and with O_NOFOLLOW it is
        # the directory, not a link's target, that the chmod through /proc reaches.
        handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=dir_fd)
        try:
            os.chmod(f"/proc/self/fd/{handle}", 0o700)
        finally:
            os.close(handle)
        fd = os.open(name, _DIR, dir_fd=dir_fd)
    if os.fstat(fd).st_mode & 0o700 != 0o700:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o700)
    return fd


# Names of subdirectories held per directory level at once: a directory of a million
# subdirectories is emptied a batch at a time (a rescan finds the rest), never listed whole.
SUBDIR_BATCH = 4096


def _empty_but_subdirs(fd: int) -> list[str]:
    """Unlink every non-directory in the directory `fd`, streaming (a list of a million
    entries is hundreds of MiB of the worker's memory); up to SUBDIR_BATCH of its
    subdirectories' names, so a full batch means: scan again once these are gone."""
    subdirs: list[str] = []
    try:
        entries = os.scandir(fd)
    except OSError:
        return []
    with entries:
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if not is_dir:
                with contextlib.suppress(OSError):
                    os.unlink(entry.name, dir_fd=fd)
            elif len(subdirs) < SUBDIR_BATCH:
                subdirs.append(entry.name)
    return subdirs


MAX_COPY_DEPTH = 64  # a venv nests about 12 levels; deeper is the sandbox's doing
# Path-based walks of the copy (the sandbox's chown of its private area) fail with
# ENAMETOOLONG past PATH_MAX (4,096 bytes, with the run directory in front).
MAX_COPY_PATH = 2048
# A venv with ML wheels holds ~100,000 entries; the disk quota alone would let the
# sandbox make millions (each counts as a 4 KiB block), copied again for every test run.
MAX_COPY_ENTRIES = 500_000
MAX_COPY_SECONDS = 300.0
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _Copy:
    """What one copy_tree call may still do, and what it left out."""

    def __init__(self, max_depth: int, max_entries: int, max_seconds: float) -> None:
        self.max_depth, self.entries_left = max_depth, max_entries
        self.deadline = time.monotonic() + max_seconds
        self.left_out: list[str] = []
        self.cut: str | None = None  # why the copy stopped early

    def take(self) -> bool:
        """One more entry, or False once the count or the time is spent (noted once)."""
        if self.cut is None:
            self.entries_left -= 1
            if self.entries_left < 0:
                self.cut = "over the copy's entry limit"
            elif time.monotonic() > self.deadline:
                self.cut = "over the copy's time limit"
            if self.cut is not None:
                self.left_out.insert(0, f"… the rest ({self.cut})")
        return self.cut is None


def copy_tree(src: Path | str, dst: Path | str, *, skip_top: frozenset[str] = frozenset(),
              max_depth: int = MAX_COPY_DEPTH, max_entries: int | None = None,
              max_seconds: float | None = None) -> list[str]:
    """Copy the directory `src`, which the sandbox wrote, to the new directory `dst`.

    Directories, regular files (holes kept) and symlinks (as links, never followed) are
    copied with their permission bits (no setuid/setgid/sticky) and times; FIFOs, sockets
    and devices are left out (`shutil.copytree` raised on a FIFO), as is everything below
    `max_depth` levels (it recursed once per level), every path longer than
    MAX_COPY_PATH bytes, the top-level names in `skip_top`, and everything past
    `max_entries` entries or `max_seconds` (MAX_COPY_ENTRIES, MAX_COPY_SECONDS unless
    given; then the first path left out says so).
    Every name is opened relative to its parent's descriptor with O_NOFOLLOW, so a link
    swapped in anywhere is copied as a link, not read through; directories are read
    as a stream, never listed whole.
    Returns the relative paths left out (at most 100 of them)."""
    state = _Copy(max_depth, MAX_COPY_ENTRIES if max_entries is None else max_entries,
                  MAX_COPY_SECONDS if max_seconds is None else max_seconds)
    src_fd = os.open(src, _DIR)
    try:
        os.mkdir(dst, 0o700)
        dst_fd = os.open(dst, _DIR)
        try:
            _copy_dir(src_fd, dst_fd, "", 1, skip_top, state)
            _copy_meta(src_fd, dst_fd)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    return state.left_out[:100]


def _copy_dir(src_fd: int, dst_fd: int, rel: str, depth: int, skip_top: frozenset[str],
              state: _Copy) -> None:
    # Recursion is bounded by max_depth, and so are the descriptors held (three a level).
    with os.scandir(src_fd) as entries:
        for entry in entries:
            name, path = entry.name, f"{rel}{entry.name}"
            if depth == 1 and name in skip_top:
                continue
            if not state.take():
                return
            if len(os.fsencode(path)) > MAX_COPY_PATH:
                _note(state.left_out, path)
                continue
            try:
                _copy_entry(src_fd, dst_fd, name, path, depth, state)
            except OSError:  # vanished, unreadable: the copy goes on without it
                _note(state.left_out, path)


def _copy_entry(src_fd: int, dst_fd: int, name: str, path: str, depth: int,
                state: _Copy) -> None:
    st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(name, dir_fd=src_fd), name, dir_fd=dst_fd)
    elif stat.S_ISDIR(st.st_mode):
        if depth >= state.max_depth:
            _note(state.left_out, path + "/")
            return
        child_src = os.open(name, _DIR, dir_fd=src_fd)
        try:
            os.mkdir(name, 0o700, dir_fd=dst_fd)
            child_dst = os.open(name, _DIR, dir_fd=dst_fd)
            try:
                _copy_dir(child_src, child_dst, path + "/", depth + 1, frozenset(), state)
                _copy_meta(child_src, child_dst)
            finally:
                os.close(child_dst)
        finally:
            os.close(child_src)
    elif stat.S_ISREG(st.st_mode):
        _copy_file(src_fd, dst_fd, name, path, state.left_out)
    else:
        _note(state.left_out, path)


def _copy_file(src_fd: int, dst_fd: int, name: str, path: str, left_out: list[str]) -> None:
    fd = os.open(name, _FILE, dir_fd=src_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped for a FIFO or a device since the stat
            _note(left_out, path)
            return
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                      | os.O_CLOEXEC, 0o600, dir_fd=dst_fd)
        try:
            _copy_data(fd, out, st.st_size)
            _copy_meta(fd, out)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _copy_data(fd: int, out: int, size: int) -> None:
    """The data extents of `fd` up to `size` (its size when opened), holes left holes.

    The disk quota counts the blocks a file uses, and RLIMIT_FSIZE caps only its size: a
    copy writing every byte turned a sparse file's holes into real zeros on the host's
    disk (a 4 KiB file of the quota became up to 1 GiB), once per test run. A file that
    grows during the copy is copied as it was opened."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole up to the end
                break
            raise
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        os.lseek(out, start, os.SEEK_SET)
        while start < end:
            sent = os.sendfile(out, fd, start, min(end - start, 1 << 24))
            if not sent:  # shrunk under the copy
                break
            start += sent
        pos = max(end, pos + 1)
    os.ftruncate(out, size)


def _copy_meta(src_fd: int, dst_fd: int) -> None:
    st = os.fstat(src_fd)
    os.fchmod(dst_fd, stat.S_IMODE(st.st_mode) & 0o777)
    os.utime(dst_fd, ns=(st.st_atime_ns, st.st_mtime_ns))


def _note(left_out: list[str], path: str) -> None:
    if len(left_out) < 100:
        left_out.append(path)


class TreeTooLarge(Exception):
    """A walk went past its bound (entries, depth or time); the message names it."""


MAX_WALK_DEPTH = 128  # two descriptors a level; no repository nests so deep


def walk_tree(root: Path | str, *, max_entries: int, max_seconds: float,
              max_depth: int = MAX_WALK_DEPTH, skip_dirs: frozenset[str] = frozenset(),
              ) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of every entry under `root`, a directory before what it
    holds; links are never followed. One open directory per level, read as a stream:
    a directory of millions of names costs no memory (os.walk lists each whole). Past
    `max_entries` entries, `max_depth` levels or `max_seconds`, raises TreeTooLarge
    with words that name the bound, the same for every tree that passes it."""
    top = os.open(root, _DIR)
    stack = [(top, os.scandir(top), "")]
    deadline, count = time.monotonic() + max_seconds, 0
    try:
        while stack:
            fd, entries, rel = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                entries.close()
                os.close(fd)
                continue
            count += 1
            if count > max_entries:
                raise TreeTooLarge(f"over {max_entries:,} entries")
            if count % 1024 == 0 and time.monotonic() > deadline:
                raise TreeTooLarge(f"a walk over {max_seconds:.0f} s")
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since the listing
            yield rel + entry.name, info
            if not stat.S_ISDIR(info.st_mode) or entry.name in skip_dirs:
                continue
            if len(stack) >= max_depth:
                raise TreeTooLarge(f"directories nested over {max_depth} levels")
            with contextlib.suppress(OSError):
                child = os.open(entry.name, _DIR, dir_fd=fd)
                try:
                    stack.append((child, os.scandir(child), f"{rel}{entry.name}/"))
                except OSError:
                    os.close(child)
    finally:
        for fd, entries, _rel in stack:
            entries.close()
            os.close(fd)
