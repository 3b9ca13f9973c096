"""The setup cache: a venv per (repository, setup inputs, Python, setup command), reused.

A second run of a repository whose setup inputs did not change (pyproject.toml, setup.py,
setup.cfg, requirement, constraint and lock files, tox.ini, the importable layout) gets
the venv the first run's setup made, and the files that setup wrote into the workspace
(an editable install's `*.egg-info/`, a generated `_version.py`), instead of running the
setup command again: no venv creation, no resolver, no download, no install.

Why it is safe to share (the cache is host-owned, and written only here):
- it is filled only by a setup phase, which runs a tree no model wrote
  (`HostRepo.distrust_setup`), right after setup and before the agent phase starts: what
  the model's Bash later does to its venv never reaches the cache;
- an entry is keyed by the repository (`HostRepo.source`: the worker's mirror of one
  GitHub repository, `solve`'s checkout), so one repository's setup never fills another's
  venv;
- the copy in is a fresh copy (never a hard link: a write through a shared inode would
  reach the cache), made by `sandbox.trees.copy_tree` (links copied as links, never
  followed; no FIFOs, devices, setuid bits); the workspace's files are written through
  descriptors opened with O_NOFOLLOW, so a link the repository commits is never followed;
- the cache directory lies in the state directory, which no sandbox binds.

An editable install points at the workspace as the sandbox sees it: bubblewrap binds
every run's workspace at /workspace and the private area at /frognano, so a venv made in
one run's directory works in another's; `unsafe-local` runs at host paths, which are
part of the key there (so it reuses a venv only in the same run directory).

Both setup caches (this one and the index endpoint's download cache) share one cap:
past it the least recently used entries go first, never one used in the last
IN_USE_SECONDS (a run may be copying it); the index endpoint keeps the cap while it
stores a download, this module after setup (`evict`, sandbox/download_cache.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from sandbox.base import ExecResult
from sandbox.download_cache import VENV_ENTRIES, evict
from sandbox.index_endpoint import PackageSources
from sandbox.trees import TreeTooLarge, copy_tree, remove_tree, walk_tree
from solver.hostgit import GitError, HostRepo, run_git

FORMAT = "1"  # part of every key: a new layout of an entry misses the old ones
VENV_CACHE_DIR_NAME = "venv-cache"  # the name solver/setup/package_index.py gives it
ENTRIES = VENV_ENTRIES
WORKSPACE_MAX_ENTRIES = 300_000  # the walks before and after setup (verdict_run's bound)
WALK_MAX_SECONDS = 60.0
# The installer's own byte code, left out of an entry: a venv's pip and setuptools are
# ~720 of its ~1,700 files, never imported by a test run, and every file a hit copies
# costs an inode (1.4 ms each on the benchmark's disk); Python compiles them in memory
# on the rare import (the sandbox sets PYTHONDONTWRITEBYTECODE).
INSTALLER_PACKAGES = frozenset({"pip", "setuptools", "pkg_resources", "_distutils_hack"})
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

# What an inferred or configured setup reads: a change to any of them misses the cache.
SETUP_INPUT_NAMES = frozenset({
    "setup.py", "setup.cfg", "pyproject.toml", "tox.ini", "noxfile.py", "MANIFEST.in",
    "Pipfile", "Pipfile.lock", "poetry.lock", "pdm.lock", "uv.lock", "pylock.toml",
    "hatch.toml", "environment.yml", ".python-version", "frognano.yml"})
_SETUP_INPUT = re.compile(r"(^|/)(requirements|constraints)[^/]*\.(txt|in)$"
                          r"|(^|/)(requirements|reqs|requirements\.d)/[^/]+\.(txt|in)$"
                          r"|\.lock$|(^|/)pylock\.[^/]+\.toml$")


def is_setup_input(path: str) -> bool:
    return PurePosixPath(path).name in SETUP_INPUT_NAMES or bool(_SETUP_INPUT.search(path))


# -- the key ---------------------------------------------------------------------------
def tree_inputs(repo: HostRepo, command: str) -> dict[str, str]:
    """From the host's git, the tree setup runs on (never the workspace): the setup
    inputs' blob ids, the files the command names, and the importable top-level names
    (an editable install maps them: a new package must miss)."""
    out = run_git("ls-tree", "-r", "-z", "--full-tree", repo.setup_base,
                  git_dir=repo.git_dir, strip=False)
    named = {token.strip("./") for token in shlex.split(command, posix=True)
             if "/" in token or "." in token} if command else set()
    inputs, layout = hashlib.sha256(), set()
    for record in out.split(b"\0"):
        meta, _, raw = record.partition(b"\t")
        if not raw:
            continue
        path = os.fsdecode(raw)
        if is_setup_input(path) or path in named:
            inputs.update(meta + b"\t" + raw + b"\0")
        parts = path.split("/")
        if parts[0] == "src" and len(parts) > 1:
            parts = parts[1:]
        if (len(parts) == 1 and path.endswith(".py")) or (len(parts) >= 2 \
                and parts[1] == "__init__.py"):
            layout.add(parts[0])
    return {"setup inputs": inputs.hexdigest(),
            "layout": hashlib.sha256("\0".join(sorted(layout)).encode()).hexdigest()}


_PYTHONS: dict[tuple[str, int, int], str] = {}


def python_identity(path_variable: str, skip: tuple[str, ...]) -> str:
    """The `python3` the setup command finds on the sandbox's PATH (its system and
    Python prefixes are bound at their host paths), as realpath and version."""
    dirs = [d for d in path_variable.split(":") if d and not d.startswith(skip)]
    found = shutil.which("python3", path=":".join(dirs))
    if found is None:
        return "no python3"
    real = os.path.realpath(found)
    info = os.stat(real)
    marker = (real, info.st_size, info.st_mtime_ns)
    if marker not in _PYTHONS:
        proc = subprocess.run([real, "-I", "-S", "-c", "import sys; print(sys.version)"],
                              capture_output=True, text=True, timeout=60, check=False)
        _PYTHONS[marker] = proc.stdout.strip() or f"exit {proc.returncode}"
    return f"{real} {_PYTHONS[marker]}"


def _digest(values: object) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


# -- the run's view ----------------------------------------------------------------------
@dataclass
class SetupCache:
    """One run's use of the setup caches: `restore` before the setup command (a hit, or
    the workspace noted for `store`), `store` after it succeeded."""

    sources: PackageSources
    workspace: Path
    venv: Path  # the private area's venv, on the host
    key: str = ""  # "" when the venv cache is off for this run
    why_off: str = ""
    before: dict[str, tuple[int, int, int, int]] | None = None
    hit: bool = False
    stored: bool = False  # this run's setup made the entry
    started: float = field(default_factory=time.monotonic)

    @property
    def entry(self) -> Path | None:
        root = self.sources.venv_cache_dir
        return root / ENTRIES / self.key if root is not None and self.key else None

    def restore(self) -> ExecResult | None:
        """A hit: the cached venv and setup's workspace writes copied in, and the setup's
        result saying so. A miss (or a copy that failed): None, the venv left empty."""
        self.started = time.monotonic()
        entry = self.entry
        if entry is not None and (entry / "meta.json").is_file():
            try:
                restored = _restore(entry, self.venv, self.workspace)
            except (OSError, ValueError) as exc:
                # Setup runs as on a miss; what was half copied is not stored as its own.
                _empty_dir(self.venv)
                self.why_off = f"the cached venv could not be copied in ({exc})"
                return None
            with contextlib.suppress(OSError):
                os.utime(entry)  # its last use, for the eviction's order
            self.hit = True
            return ExecResult(0, _hit_line(self.key, restored), "",
                              seconds=time.monotonic() - self.started)
        if entry is not None:
            self.before = _workspace_state(self.workspace)
        return None

    def store(self, result: ExecResult) -> ExecResult:
        """After a setup that succeeded: the venv and setup's workspace writes into the
        cache (unless off or unusable), then the caches cut to their cap. The result,
        with a line saying what became of the cache."""
        if self.hit:
            return result
        line = f"setup cache: not stored ({self.why_off})" if self.why_off else ""
        try:
            if self.entry is not None and self.before is not None:
                line = _store(self.entry, self.venv, self.workspace, self.before,
                              self.sources.cache_max_bytes)
                self.stored = line.startswith("setup cache: stored")
            evict(self.sources, keep=self.entry)
        except OSError as exc:  # a full disk: the run goes on, uncached
            line = f"setup cache: not stored ({exc})"
        if not line:
            return result
        return dataclasses.replace(result, stdout=f"{result.stdout.rstrip()}\n{line}\n")


    def link_venv(self, dest: Path) -> bool:
        """`dest` (new) a tree of hard links to the entry's venv, for the harness's
        host-only copy of the private area, which test runs bind read-only (never the
        agent's venv: that one is a fresh copy the sandbox owns). Only for an entry that
        holds this run's venv as setup left it; False when there is none or it failed."""
        entry = self.entry
        if entry is None or not (self.hit or self.stored):
            return False
        try:
            link_tree(entry / "venv", dest)
        except (OSError, TreeTooLarge):
            remove_tree(dest)
            return False
        return True


def link_tree(src: Path, dest: Path) -> None:
    """`dest` made anew with `src`'s directories, its files as hard links and its
    links as links (a host-owned tree: the cache's)."""
    os.mkdir(dest, 0o700)
    for path, info in walk_tree(src, max_entries=10_000_000, max_seconds=600.0):
        target = dest / path
        if stat.S_ISDIR(info.st_mode):
            os.mkdir(target, stat.S_IMODE(info.st_mode) & 0o777)
        elif stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(src / path), target)
        elif stat.S_ISREG(info.st_mode):
            os.link(src / path, target, follow_symlinks=False)
    os.chmod(dest, stat.S_IMODE(os.lstat(src).st_mode) & 0o777)


def for_run(sandbox: Any, repo: HostRepo, command: str) -> SetupCache | None:
    """The run's SetupCache; None when the sandbox has no setup cache configured."""
    config = getattr(sandbox, "config", None)
    sources: PackageSources | None = getattr(config, "package_sources", None)
    if config is None or sources is None or (sources.venv_cache_dir is None
                                             and sources.cache_dir is None):
        return None
    venv = config.private_dir / "venv"
    cache = SetupCache(sources, repo.work_tree, venv)
    source = getattr(repo, "source", None)
    if sources.venv_cache_dir is None:
        pass  # the download cache's cap still applies after setup
    elif source is None:
        cache.why_off = "the run does not say which repository it is"
    else:
        try:
            cache.key = run_key(sandbox, config, repo, command, str(source))
        except (GitError, OSError, ValueError, subprocess.SubprocessError) as exc:
            cache.why_off = f"no key: {exc}"
    return cache


def run_key(sandbox: Any, config: Any, repo: HostRepo, command: str, source: str) -> str:
    """The key's parts: whose repository, what its setup reads, which Python, the
    command, where the sandbox puts the workspace and the venv, and where pip installs
    from (hashed: an index URL may hold a token)."""
    environment = sandbox.environment() if hasattr(sandbox, "environment") else {}
    inside = str(getattr(sandbox, "workdir", ""))
    workspace = str(Path(config.workspace).resolve())
    # A backend that runs at host paths (unsafe-local): they are what the venv points at.
    paths = [inside] if inside != workspace else [inside, str(config.private_dir.resolve())]
    venv_bin = (str(config.private_dir.resolve()), "/frognano/")
    sources = config.package_sources
    parts = {"format": FORMAT, "repository": source, "command": command,
             "python": python_identity(environment.get("PATH", ""), venv_bin),
             "sandbox": [type(sandbox).__name__, *paths],
             "sources": _digest([sources.urls(), sorted(config.setup_env.items())]),
             **tree_inputs(repo, command)}
    return _digest(parts)[:40]


def _hit_line(key: str, restored: int) -> str:
    return (f"setup cache: the venv and {restored} file(s) setup wrote into the workspace "
            f"restored from entry {key[:12]} (same repository, setup inputs, Python and "
            "command); the setup command did not run\n")


# -- store and restore -------------------------------------------------------------------
def _workspace_state(root: Path) -> dict[str, tuple[int, int, int, int]] | None:
    """path → (mode, size, mtime, inode) of everything under the workspace; None when it
    is too large to walk (then nothing is stored)."""
    try:
        return {path: (info.st_mode, info.st_size, info.st_mtime_ns, info.st_ino)
                for path, info in walk_tree(root, max_entries=WORKSPACE_MAX_ENTRIES,
                                            max_seconds=WALK_MAX_SECONDS)}
    except (TreeTooLarge, OSError):
        return None


def setup_writes(before: dict[str, tuple[int, int, int, int]],
                 after: dict[str, tuple[int, int, int, int]]) -> tuple[list[str], list[str]]:
    """(what setup added or changed: files, links and new directories; what it removed)."""
    written = [path for path, now in after.items()
               if path not in before or (not stat.S_ISDIR(now[0]) and before[path] != now)]
    return sorted(written), sorted(path for path in before if path not in after)


def _store(entry: Path, venv: Path, workspace: Path,
           before: dict[str, tuple[int, int, int, int]], max_bytes: int) -> str:
    """The entry written whole in a scratch directory, then renamed into place."""
    if entry.exists():
        return ""  # a run alongside stored the same key first
    after = _workspace_state(workspace)
    if after is None:
        return "setup cache: not stored (the workspace is too large to compare)"
    written, removed = setup_writes(before, after)
    if removed:
        return f"setup cache: not stored (setup removed {len(removed)} path(s) of the tree)"
    entry.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".new-", dir=entry.parent))
    try:
        left_out = copy_tree(venv, scratch / "venv")
        drop_installer_bytecode(scratch / "venv")
        left_out += _copy_writes(workspace, written, scratch / "workspace")
        size = _tree_bytes(scratch)
        if left_out:
            return f"setup cache: not stored ({len(left_out)} entries cannot be copied)"
        if max_bytes and size > max_bytes:
            return f"setup cache: not stored ({size} bytes, over the cap of {max_bytes})"
        meta = {"format": FORMAT, "bytes": size, "workspace_files": len(written)}
        (scratch / "meta.json").write_text(json.dumps(meta))
        try:
            os.rename(scratch, entry)
        except OSError:
            return ""  # stored by another run meanwhile
        return f"setup cache: stored as entry {entry.name[:12]} ({size / 1024**2:.1f} MiB)"
    finally:
        remove_tree(scratch)


# The levels from a venv down to an installer package: lib*/python*/site-packages/<name>.
_INSTALLER_LEVELS: tuple[Callable[[str], bool], ...] = (
    lambda name: fnmatch.fnmatchcase(name, "lib*"),
    lambda name: fnmatch.fnmatchcase(name, "python*"),
    lambda name: name == "site-packages",
    lambda name: name in INSTALLER_PACKAGES)
_BYTECODE_MAX_DEPTH = 16  # pip nests 6 levels below its package


def drop_installer_bytecode(venv: Path) -> None:
    """Remove the `__pycache__` folders of INSTALLER_PACKAGES from a venv (host-owned).

    The venv is a copy of what setup left, links copied as links: setup can leave `lib`
    (or `lib64`, `python3.11`, `site-packages`, `pip`) as a link to a host path, and this
    runs as the worker, root maybe. So every level is opened by name from its parent's
    descriptor with O_NOFOLLOW and only real directories are entered; a link is never
    followed, only the run's own folders are emptied."""
    try:
        root = os.open(venv, _DIR)
    except OSError:
        return
    try:
        _drop_below(root, _INSTALLER_LEVELS)
    finally:
        os.close(root)


def _real_subdirs(fd: int) -> list[str]:
    """The names of the directory `fd`'s subdirectories that are not links."""
    try:
        with os.scandir(fd) as entries:
            return [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _drop_below(fd: int, levels: tuple[Callable[[str], bool], ...], depth: int = 0) -> None:
    """Below the directory `fd`: down the `levels` (each a test of a name), then every
    `__pycache__` of what they lead to, emptied and removed."""
    for name in _real_subdirs(fd):
        if levels and not levels[0](name):
            continue
        if not levels and name == "__pycache__":
            _drop_cache(fd, name)
            continue
        if depth >= len(_INSTALLER_LEVELS) + _BYTECODE_MAX_DEPTH:
            return
        try:
            child = os.open(name, _DIR, dir_fd=fd)  # a link swapped in: ELOOP, skipped
        except OSError:
            continue
        try:
            _drop_below(child, levels[1:], depth + 1)
        finally:
            os.close(child)


def _drop_cache(parent: int, name: str) -> None:
    """The `__pycache__` called `name` in the directory `parent`: its files (unlinked,
    never followed), then itself."""
    try:
        fd = os.open(name, _DIR, dir_fd=parent)
    except OSError:
        return
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):  # a directory in it stays, and so does it
                    os.unlink(entry.name, dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=parent)


def _copy_writes(workspace: Path, written: list[str], dest: Path) -> list[str]:
    """Setup's writes under `dest`, read from the workspace through O_NOFOLLOW
    descriptors (a directory swapped for a link is not read through)."""
    dest.mkdir(mode=0o700)
    left_out: list[str] = []
    root = os.open(workspace, _DIR)
    try:
        for path in written:
            parts = path.split("/")
            try:
                parent = walk_dirs(root, parts[:-1], create=False)
            except OSError:
                left_out.append(path)
                continue
            try:
                info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
                target = dest / path
                target.parent.mkdir(parents=True, exist_ok=True)
                if stat.S_ISDIR(info.st_mode):
                    target.mkdir(exist_ok=True)
                elif stat.S_ISLNK(info.st_mode):
                    os.symlink(os.readlink(parts[-1], dir_fd=parent), target)
                elif stat.S_ISREG(info.st_mode):
                    _copy_file(parent, parts[-1], target)
                else:
                    left_out.append(path)
            except OSError:
                left_out.append(path)
            finally:
                os.close(parent)
    finally:
        os.close(root)
    return left_out


def _copy_file(parent: int, name: str, target: Path) -> None:
    fd = os.open(name, _READ, dir_fd=parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{name} is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as src, open(target, "xb") as out:
            shutil.copyfileobj(src, out)
        os.chmod(target, stat.S_IMODE(info.st_mode) & 0o777)
        os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    finally:
        os.close(fd)


def walk_dirs(root: int, parts: list[str], *, create: bool,
               owner: tuple[int, int] | None = None) -> int:
    """A descriptor of root/parts..., each level opened with O_NOFOLLOW (a link there is
    an error, never followed); `create` makes the missing levels (given to `owner`)."""
    fd = os.dup(root)
    for part in parts:
        if part in ("", ".", ".."):
            os.close(fd)
            raise ValueError(f"a path with {part!r} in it")
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if owner is not None:
                        os.chown(part, *owner, dir_fd=fd, follow_symlinks=False)
            child = os.open(part, _DIR, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


def _tree_bytes(root: Path) -> int:
    return sum(info.st_blocks * 512 for _path, info in
               walk_tree(root, max_entries=10_000_000, max_seconds=600.0))


def _owner(path: Path) -> tuple[int, int] | None:
    """The sandbox's uid and gid where a root worker handed `path` to it; else None."""
    info = os.lstat(path)
    if os.geteuid() != 0 or info.st_uid == 0:
        return None
    return info.st_uid, info.st_gid


def _empty_dir(path: Path) -> None:
    """`path` a fresh empty directory, as the sandbox's start left it."""
    owner = _owner(path.parent)
    remove_tree(path)
    os.mkdir(path, 0o755)
    if owner is not None:
        os.lchown(path, *owner)


def _restore(entry: Path, venv: Path, workspace: Path) -> int:
    """The entry's venv as a fresh copy at `venv` and its workspace files written into
    the workspace; both handed to the sandbox's uid. The files written."""
    owner = _owner(venv.parent)
    remove_tree(venv)
    left_out = copy_tree(entry / "venv", venv)
    if left_out:
        raise OSError(f"{len(left_out)} entries of the cached venv were not copied")
    if owner is not None:
        for path, _info in walk_tree(venv, max_entries=10_000_000, max_seconds=600.0):
            os.lchown(venv / path, *owner)
        os.lchown(venv, *owner)
    return _write_into(entry / "workspace", workspace, _owner(workspace))


def _write_into(files: Path, workspace: Path, owner: tuple[int, int] | None) -> int:
    """Copy the cached workspace writes over the workspace, a parent before its
    children; an existing file at a path is replaced (its name unlinked, never written
    through), a link on the way is an error."""
    if not files.is_dir():
        return 0
    count = 0
    root = os.open(workspace, _DIR)
    try:
        for path, info in walk_tree(files, max_entries=10_000_000, max_seconds=600.0):
            parts = path.split("/")
            parent = walk_dirs(root, parts[:-1], create=True, owner=owner)
            try:
                if stat.S_ISDIR(info.st_mode):
                    os.close(walk_dirs(parent, parts[-1:], create=True, owner=owner))
                    continue
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(parts[-1], dir_fd=parent)
                if stat.S_ISLNK(info.st_mode):
                    os.symlink(os.readlink(files / path), parts[-1], dir_fd=parent)
                else:
                    _write_file(files / path, parent, parts[-1], info)
                if owner is not None:
                    os.chown(parts[-1], *owner, dir_fd=parent, follow_symlinks=False)
                count += 1
            finally:
                os.close(parent)
    finally:
        os.close(root)
    return count


def _write_file(source: Path, parent: int, name: str, info: os.stat_result) -> None:
    out = os.open(name, _CREATE, 0o600, dir_fd=parent)
    try:
        with open(source, "rb") as src, os.fdopen(os.dup(out), "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.fchmod(out, stat.S_IMODE(info.st_mode) & 0o777)
        os.utime(out, ns=(info.st_atime_ns, info.st_mtime_ns))
    finally:
        os.close(out)
