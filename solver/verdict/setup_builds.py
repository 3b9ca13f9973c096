"""What setup compiled, carried into every test tree: a project's C or Cython extension.

Setup builds a project's extension modules into the setup tree (an editable install
builds them in place: `src/markupsafe/_speedups.cpython-311-x86_64-linux-gnu.so`), but
the harness's test trees are made from the host's git objects, which hold no build
output. Without them the tests of the compiled code are skipped and the pure-Python
fallback is what gets tested; a project whose extension is mandatory fails to import.

So right after setup, before the model's first turn, the host records the extension
modules setup left in the tree: untracked files named as shared objects (`*.so`,
`*.so.1`) that start as an ELF binary does, in a folder of the repository's own (not
`build/`, `.tox/` or a venv inside the tree). It copies each into a host-owned store
with its size and SHA-256 (`manifest.json`), and writes those copies, and nothing else,
into each tree a test run gets. What the model builds later never reaches a test tree
this way, and a binary in its change is refused (solver/policy.py, "a fix is source
text").

Every read of the setup tree is bounded (entries and seconds of the walk, files and bytes
in all), and every name is opened below a descriptor of its folder with O_NOFOLLOW: a
link is never read through, on the setup tree as on a test tree.

The build is of the original source. A change that edits compiled code's source (C,
C++, Cython, Rust) is judged with that build, so no test ran the edit: the verdict puts
it in front of the reviewer (`stale_build_flags`, docs/VERDICT.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sandbox.trees import TreeTooLarge, remove_tree, walk_tree
from solver.setup.venv_cache import walk_dirs
from solver.verdict.change_flags import MAX_FLAGS, ChangeFlag, Reader

# A shared object by its name (`_speedups.cpython-311-x86_64-linux-gnu.so`, `.abi3.so`,
# `libfoo.so.1`), and by its first bytes: what the import system or the loader loads.
SHARED_OBJECT = re.compile(r"\.so(\.\d+)*$")
ELF_MAGIC = b"\x7fELF"
# Compiled code's source: an edit to one is not in the build the tests ran.
NATIVE_SOURCE = re.compile(r"\.(c|h|cc|cpp|cxx|c\+\+|hh|hpp|hxx|pyx|pxd|pxi|rs|f|f90|f95"
                           r"|for|cu|cuh)$", re.IGNORECASE)
# The bounds of what is read from the setup tree. A project ships a handful of extension
# modules, a large one (numpy's own build) about a hundred of ~40 MiB in all.
MAX_FILES = 200
MAX_BYTES = 256 * 1024**2
WALK_MAX_ENTRIES = 300_000  # the work tree's bound (verdict_run.TREE_MAX_ENTRIES)
WALK_MAX_SECONDS = 60.0
SKIP_DIRS = frozenset({".git", "__pycache__"})
MANIFEST = "manifest.json"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


@dataclass(frozen=True)
class BuiltFile:
    """One file setup built, as the host copied it right after setup."""

    path: str  # relative to the tree's root
    size: int
    sha256: str
    mode: int  # its permission bits (an extension is 0o755 as built)


@dataclass
class SetupBuilds:
    """The files setup built that every test tree gets (`store` holds their copies, one
    per index), and what was found but not carried, with why (bounds, unreadable)."""

    store: Path
    files: list[BuiltFile] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, store: Path) -> SetupBuilds:
        """What `record_builds` stored there (a replay's runner, after the run); none when
        nothing was recorded."""
        try:
            data = json.loads((store / MANIFEST).read_text())
            files = [BuiltFile(**entry) for entry in data["files"]]
            return cls(store, files, [str(x) for x in data["left_out"]])
        except (OSError, ValueError, KeyError, TypeError):
            return cls(store)

    def place(self, dest: Path) -> list[str]:
        """Write each stored file into the tree at `dest` (made from git, not yet given to
        a sandbox), checked against its recorded hash. Left alone, and returned: a file
        whose folder the tree lacks (the change removed it) or whose path the tree
        already holds, one reached only through a link, or one whose copy changed."""
        skipped: list[str] = []
        root = os.open(dest, _DIR)
        try:
            for index, built in enumerate(self.files):
                try:
                    _place_one(self.store / "files" / str(index), root, built)
                except (OSError, ValueError) as exc:
                    skipped.append(f"{built.path} ({_why(exc)})")
        finally:
            os.close(root)
        return skipped


def record_builds(work_tree: Path, tracked: Callable[[], Iterable[str]],
                  store: Path) -> SetupBuilds:
    """The extension modules setup left in `work_tree` (see the module's words), copied
    into `store` (made anew) with a manifest. `tracked()`: the repository's paths at base
    (asked only when a file is named as one); a file git holds is in every test tree
    already, and only the folders of those paths hold what is carried."""
    remove_tree(store)
    os.makedirs(store / "files", mode=0o700)
    builds = SetupBuilds(store)
    candidates = _candidates(work_tree, builds.left_out)
    if candidates:
        paths = set(tracked())
        folders = {posixpath.dirname(path) for path in paths}
        candidates = [path for path in candidates if path not in paths
                      and posixpath.dirname(path) in folders]
    total = 0
    root = os.open(work_tree, _DIR)
    try:
        for path in candidates:
            try:
                built = _copy_in(root, path, store / "files" / str(len(builds.files)),
                                 MAX_BYTES - total, len(builds.files) < MAX_FILES)
            except OSError as exc:
                builds.left_out.append(f"{path} ({_why(exc)})")
                continue
            if built is not None:
                builds.files.append(built)
                total += built.size
    finally:
        os.close(root)
    (store / MANIFEST).write_text(json.dumps({"files": [asdict(f) for f in builds.files],
                                              "left_out": builds.left_out}))
    return builds


def _candidates(work_tree: Path, left_out: list[str]) -> list[str]:
    """Regular files named as shared objects, sorted; a walk past its bound is noted."""
    found = []
    try:
        for path, info in walk_tree(work_tree, max_entries=WALK_MAX_ENTRIES,
                                    max_seconds=WALK_MAX_SECONDS, skip_dirs=SKIP_DIRS):
            if stat.S_ISREG(info.st_mode) and SHARED_OBJECT.search(path):
                found.append(path)
    except TreeTooLarge as exc:
        left_out.append(f"the setup tree was not searched further for built files: {exc}")
    return sorted(found)


def _copy_in(root: int, path: str, target: Path, room: int,
             more: bool) -> BuiltFile | None:
    """`path` under `root` copied to `target` with its hash; None when it is no ELF
    file. OSError when it cannot be read, is over the `room` left in the bytes' bound, or
    one `more` file is over the bound of files."""
    parts = path.split("/")
    parent = walk_dirs(root, parts[:-1], create=False)
    try:
        fd = os.open(parts[-1], _READ, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped for a FIFO since the walk
            raise OSError(0, "not a regular file")
        if os.pread(fd, len(ELF_MAGIC), 0) != ELF_MAGIC:
            return None
        if not more:
            raise OSError(0, f"over {MAX_FILES} built files")
        if info.st_size > room:
            raise OSError(0, f"over the {MAX_BYTES / 1024**2:.0f} MiB of built files "
                          "carried")
        out = os.open(target, _CREATE, 0o600)
        try:
            digest, size = _copy_fd(fd, out, info.st_size)
        finally:
            os.close(out)
        return BuiltFile(path, size, digest, stat.S_IMODE(info.st_mode) & 0o755)
    finally:
        os.close(fd)


def _copy_fd(src: int, out: int, size: int) -> tuple[str, int]:
    """Up to `size` bytes of `src` from its start into `out`; their SHA-256 and count. The
    size is the file's when opened: one growing under the copy is read no further."""
    digest, done = hashlib.sha256(), 0
    while done < size:
        chunk = os.pread(src, min(_CHUNK, size - done), done)
        if not chunk:
            break
        view = memoryview(chunk)
        while view:
            view = view[os.write(out, view):]
        digest.update(chunk)
        done += len(chunk)
    return digest.hexdigest(), done


def _place_one(source: Path, root: int, built: BuiltFile) -> None:
    """The stored copy of `built` written at its path under `root`, streamed and hashed;
    removed again when it is not the file recorded."""
    parts = built.path.split("/")
    parent = walk_dirs(root, parts[:-1], create=False)
    try:
        src = os.open(source, _READ)
        try:
            out = os.open(parts[-1], _CREATE, 0o600, dir_fd=parent)
            try:
                digest, size = _copy_fd(src, out, built.size + 1)
                if size != built.size or digest != built.sha256:
                    raise ValueError("its stored copy no longer matches the recorded hash")
                os.fchmod(out, built.mode)
            except (OSError, ValueError):
                with contextlib.suppress(OSError):
                    os.unlink(parts[-1], dir_fd=parent)
                raise
            finally:
                os.close(out)
        finally:
            os.close(src)
    finally:
        os.close(parent)


def stale_build_flags(paths: Iterable[str], read_base: Reader, read_candidate: Reader,
                      built: list[BuiltFile]) -> list[ChangeFlag]:
    """The change's edits to compiled code's source, for the reviewer first: the tests ran
    the build setup made of the original source (or none, when setup built nothing), so
    no test ran what the change edits there. Rebuilding it would run the model's build
    with the tree's compiler flags in every test run; saying so is what stays true."""
    carried = ", ".join(f"`{f.path}`" for f in built[:3]) + (
        f" and {len(built) - 3} more" if len(built) > 3 else "")
    ran = (f"the tests ran the build setup made of the original source ({carried})"
           if built else "setup built no extension module, so no test ran it")
    flags = []
    for path in sorted(p for p in set(paths) if NATIVE_SOURCE.search(p)):
        before, after = read_base(path), read_candidate(path)
        how = "deletes" if after is None else "adds" if before is None else "edits"
        flags.append(ChangeFlag(path, _first_changed_line(before, after), "stale-build",
                                f"{how} compiled code's source; {ran}"))
    return flags[:MAX_FLAGS]


def _first_changed_line(before: bytes | None, after: bytes | None) -> int:
    old, new = (before or b"").splitlines(), (after or b"").splitlines()
    return next((n for n, (a, b) in enumerate(zip(old, new, strict=False), 1) if a != b),
                min(len(old), len(new)) + 1)


def _why(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc))
