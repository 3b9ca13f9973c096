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
    fresh = True
    try:
        while True:
            if fresh:
                pending[-1] = _empty_but_subdirs(fd)
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
                fresh = True
                continue
            pending.pop()
            if not names:
                break
            parent = os.open("..", _DIR, dir_fd=fd)
            os.close(fd)
            fd = parent
            with contextlib.suppress(OSError):
                os.rmdir(names.pop(), dir_fd=fd)
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


def _empty_but_subdirs(fd: int) -> list[str]:
    """Unlink every non-directory in the directory `fd`; its subdirectories' names."""
    subdirs = []
    try:
        entries = list(os.scandir(fd))
    except OSError:
        return []
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            subdirs.append(entry.name)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.name, dir_fd=fd)
    return subdirs


MAX_COPY_DEPTH = 64  # a venv nests about 12 levels; deeper is the sandbox's doing
# Path-based walks of the copy (the sandbox's chown of its private area) fail with
# ENAMETOOLONG past PATH_MAX (4,096 bytes, with the run directory in front).
MAX_COPY_PATH = 2048
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def copy_tree(src: Path | str, dst: Path | str, *, skip_top: frozenset[str] = frozenset(),
              max_depth: int = MAX_COPY_DEPTH) -> list[str]:
    """Copy the directory `src`, which the sandbox wrote, to the new directory `dst`.

    Directories, regular files (holes kept) and symlinks (as links, never followed) are
    copied with their permission bits (no setuid/setgid/sticky) and times; FIFOs, sockets
    and devices are left out (`shutil.copytree` raised on a FIFO), as is everything below
    `max_depth` levels (it recursed once per level), every path longer than
    MAX_COPY_PATH bytes, and the top-level names in `skip_top`. Every name is opened
    relative to its parent's descriptor with O_NOFOLLOW, so a link swapped in anywhere
    is copied as a link, not read through.
    Returns the relative paths left out (at most 100 of them)."""
    left_out: list[str] = []
    src_fd = os.open(src, _DIR)
    try:
        os.mkdir(dst, 0o700)
        dst_fd = os.open(dst, _DIR)
        try:
            _copy_dir(src_fd, dst_fd, "", 1, max_depth, skip_top, left_out)
            _copy_meta(src_fd, dst_fd)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    return left_out


def _copy_dir(src_fd: int, dst_fd: int, rel: str, depth: int, max_depth: int,
              skip_top: frozenset[str], left_out: list[str]) -> None:
    # Recursion is bounded by max_depth, and so are the descriptors held (two a level).
    for entry in sorted(os.scandir(src_fd), key=lambda e: e.name):
        name, path = entry.name, f"{rel}{entry.name}"
        if depth == 1 and name in skip_top:
            continue
        if len(os.fsencode(path)) > MAX_COPY_PATH:
            _note(left_out, path)
            continue
        try:
            _copy_entry(src_fd, dst_fd, name, path, depth, max_depth, left_out)
        except OSError:  # vanished, unreadable: the copy goes on without it
            _note(left_out, path)


def _copy_entry(src_fd: int, dst_fd: int, name: str, path: str, depth: int,
                max_depth: int, left_out: list[str]) -> None:
    st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(name, dir_fd=src_fd), name, dir_fd=dst_fd)
    elif stat.S_ISDIR(st.st_mode):
        if depth >= max_depth:
            _note(left_out, path + "/")
            return
        child_src = os.open(name, _DIR, dir_fd=src_fd)
        try:
            os.mkdir(name, 0o700, dir_fd=dst_fd)
            child_dst = os.open(name, _DIR, dir_fd=dst_fd)
            try:
                _copy_dir(child_src, child_dst, path + "/", depth + 1, max_depth,
                          frozenset(), left_out)
                _copy_meta(child_src, child_dst)
            finally:
                os.close(child_dst)
        finally:
            os.close(child_src)
    elif stat.S_ISREG(st.st_mode):
        _copy_file(src_fd, dst_fd, name, path, left_out)
    else:
        _note(left_out, path)


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
