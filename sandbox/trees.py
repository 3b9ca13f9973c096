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
import os
from pathlib import Path

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: Path | str) -> None:
    """Remove `path` and everything below it; errors on single entries are skipped."""
    try:
        fd = os.open(path, _DIR)
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
                    child = os.open(name, _DIR, dir_fd=fd)
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
