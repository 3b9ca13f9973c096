"""The one host-side git layer: git on the host never runs inside a tree the model touched.

Everything under a workspace was written by the model or by the repository's own
setup and test commands, and the model may have rewritten the workspace's `.git`
(it is the sandbox's own, writable copy). So the host keeps a git directory of its
own, outside the workspace (`<run_dir>/git`), and every command runs with:

- a clean environment (`env -i`: nothing of the worker's, no `GIT_*`, no App key),
  `HOME` and `XDG_CONFIG_HOME` an empty host directory, no system or global config;
- `GIT_DIR` the host's own directory and `GIT_WORK_TREE` the workspace, so git never
  reads the workspace's `.git` (its config, hooks, index or objects);
- hooks, fsmonitor, pagers and external diff/textconv drivers off, submodules ignored
  and never recursed into;
- attributes from the work tree neutralised: `$GIT_DIR/info/attributes`, which
  outranks every `.gitattributes`, sets filter, diff, merge, text, eol, ident and
  working-tree-encoding to unspecified, so files are staged and checked out byte for
  byte (and no driver is defined in a config the host wrote anyway);
- nested repositories (a `.git` file, directory or symlink below the top level) found
  by a walk that never follows symlinks, before git touches the tree, and left out of
  the change: git never descends into them, so they never become gitlinks and their
  config never runs. `Snapshot.dropped` names them.

GitPython's `git.Git` runs the commands (process handling, timeouts, streaming).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.trees import remove_tree

# GitPython probes for git when imported and raises if PATH has none; we resolve git
# ourselves and say how to install it (GitMissing), so let the import succeed.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
import git as gitpython

Identity = tuple[str, str]  # (name, email)
LOCAL_IDENTITY: Identity = ("FrogNano", "frognano-bot@users.noreply.github.com")
DEFAULT_MAX_DIFF_BYTES = 5 * 1024**2  # the one default for the largest publishable patch
MAX_NESTED_REPOS = 200  # beyond this the tree is refused rather than walked into pathspecs
GIT_TIMEOUT_SECONDS = 600

# Build outputs and caches that must never reach a commit, even when the repository's
# own .gitignore forgets them. Only untracked files are affected.
GLOBAL_EXCLUDES = """\
__pycache__/
*.py[cod]
.pytest_cache/
.mypy_cache/
.ruff_cache/
.hypothesis/
.tox/
.nox/
.venv/
venv/
*.egg-info/
.eggs/
node_modules/
.coverage
coverage.xml
htmlcov/
.cache/
"""
# Highest-precedence attributes: nothing from the work tree converts or drives anything.
NEUTRAL_ATTRIBUTES = ("* !filter !diff !merge !text !eol !ident !working-tree-encoding "
                      "!crlf !export-subst\n")
# On every command line, so they outrank any config file git might still read.
HARDENING = (
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.untrackedCache=false",
    "core.pager=cat", "color.ui=false", "core.autocrlf=false", "core.symlinks=true",
    "core.quotePath=false", "core.trustctime=true", "core.checkStat=default",
    # Refuse paths that are `.git` on a reviewer's macOS or Windows checkout (git's
    # defaults protect only the platform it runs on): `.g\u200cit`, `git~1`, `.git.`.
    "core.protectHFS=true", "core.protectNTFS=true",
    "diff.ignoreSubmodules=all", "diff.external=", "diff.noprefix=false",
    "diff.mnemonicPrefix=false", "diff.relative=false", "status.submoduleSummary=false",
    "submodule.recurse=false", "fetch.recurseSubmodules=false", "push.recurseSubmodules=no",
    "protocol.ext.allow=never", "credential.helper=", "gc.auto=0", "maintenance.auto=false",
    "advice.detachedHead=false", "init.defaultBranch=main",
)
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_ENV = shutil.which("env", path=_SAFE_PATH) or "/usr/bin/env"
_EMPTY_SHA = "0" * 40
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # what a root commit changed from


class GitError(RuntimeError):
    """A git command failed; the message carries git's own words."""


class GitMissing(GitError):
    """git itself cannot be run."""


def _git_binary() -> str:
    found = shutil.which("git")  # the worker's PATH picks git; git's children get _SAFE_PATH
    if not found:
        raise GitMissing("git is not installed (or not on PATH); install it, e.g. "
                         "`apt-get install git`")
    return found


_home: Path | None = None


def empty_home() -> Path:
    """An empty, host-owned HOME: no ~/.gitconfig, no $XDG_CONFIG_HOME/git/attributes."""
    global _home
    if _home is None or not _home.is_dir():
        _home = Path(tempfile.mkdtemp(prefix="frognano-git-home-"))
    return _home


def run_git(*args: str, cwd: Path | None = None, git_dir: Path | None = None,
            work_tree: Path | None = None, env: dict[str, str] | None = None,
            input_file: Path | None = None, user_config: bool = False,
            timeout: float = GIT_TIMEOUT_SECONDS, redact: str | None = None,
            strip: bool = True) -> bytes:
    """Run git with the hardened environment; stdout as bytes, GitError on failure.

    `user_config`: for the user's own repository (`frognano solve`'s checks and the
    final fetch into it), their `~/.gitconfig` applies; the environment is still clean.
    """
    argv = _argv(args, git_dir=git_dir, work_tree=work_tree, env=env, user_config=user_config)
    runner = gitpython.Git(str(cwd or git_dir or empty_home()))
    stdin = input_file.open("rb") if input_file else None
    try:
        status, out, err = runner.execute(
            argv, istream=stdin, with_extended_output=True, with_exceptions=False,
            stdout_as_string=False, kill_after_timeout=timeout,
            strip_newline_in_stdout=strip)
    except gitpython.GitCommandNotFound as exc:
        raise GitMissing(f"cannot run git: {exc}") from None
    finally:
        if stdin:
            stdin.close()
    if status != 0:
        text = (err if isinstance(err, str) else err.decode("utf-8", "replace")).strip()
        if redact:
            text = text.replace(redact, "***")
        if status == -9 or "timed out" in text.lower():
            raise GitError(f"git {args[0]} took longer than {timeout:.0f}s")
        raise GitError(f"git {args[0]} failed: {text}")
    return out if isinstance(out, bytes) else out.encode()


def _argv(args: Iterable[str], *, git_dir: Path | None, work_tree: Path | None,
          env: dict[str, str] | None, user_config: bool) -> list[str]:
    clean = {"PATH": _SAFE_PATH, "LC_ALL": "C", "LANGUAGE": "C", "GIT_TERMINAL_PROMPT": "0",
             "GIT_PAGER": "cat", "PAGER": "cat", "GIT_CONFIG_NOSYSTEM": "1",
             "GIT_ATTR_NOSYSTEM": "1", "GIT_NO_REPLACE_OBJECTS": "1"}
    if user_config:
        home = os.environ.get("HOME")
        if home:
            clean["HOME"] = home
    else:
        home = str(empty_home())
        clean.update({"HOME": home, "XDG_CONFIG_HOME": home,
                      "GIT_CONFIG_GLOBAL": "/dev/null"})
    if git_dir is not None:
        clean["GIT_DIR"] = str(git_dir)
    if work_tree is not None:
        clean["GIT_WORK_TREE"] = str(work_tree)
    clean.update(env or {})
    pairs = [f"{key}={value}" for key, value in clean.items()]
    config = [part for item in HARDENING for part in ("-c", item)]
    return [_ENV, "-i", *pairs, _git_binary(), *config, *args]


@dataclass(frozen=True)
class Snapshot:
    base: str  # commit sha the run started from
    tree: str  # tree sha of the work tree, staged into the host's own index
    diff: str  # `git diff --binary base tree`, surrogateescape-decoded; "" when too_large
    paths: list[str]  # changed paths (no renames; both sides)
    dropped: list[str] = field(default_factory=list)  # nested repositories left out
    diff_bytes: int = 0  # size of the patch (at least max+1 when too_large)
    too_large: bool = False  # the patch is over the limit: never publish it
    max_diff_bytes: int = DEFAULT_MAX_DIFF_BYTES
    # Changed paths that are symlinks in `tree` → their targets (publish.py refuses a
    # link that stands in for `.github/workflows`).
    links: dict[str, str] = field(default_factory=dict)
    # Tracked paths the setup phase wrote (an editable install's `*.egg-info/`), left out
    # of the change as they are at base; and those the agent phase changed after setup
    # too, kept as the agent left them (HostRepo.snapshot).
    setup_writes: list[str] = field(default_factory=list)
    setup_overlap: list[str] = field(default_factory=list)

    @property
    def refusal(self) -> str | None:
        """Why this change must not be published, in words for the status comment."""
        if self.too_large:
            return (f"the change is larger than the limit for one patch "
                    f"({_size(self.max_diff_bytes)}); nothing was pushed")
        return None


def _size(n: int) -> str:
    return f"{n / 1024**2:.1f} MB" if n >= 1024**2 else f"{n / 1024:.0f} kB" if n >= 1024 \
        else f"{n} bytes"


# Code points HFS+ ignores in names (git's is_hfs_dotgit): `.g\u200cit` is `.git` there.
_HFS_IGNORED = dict.fromkeys([0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F),
                              *range(0x206A, 0x2070), 0xFEFF])


def looks_like_dotgit(name: str) -> bool:
    """Whether `name` is `.git` on some client's file system: any case, HFS+'s ignored
    code points, NTFS's trailing dots and spaces, its short name `git~1` and its
    `::$INDEX_ALLOCATION` stream (git's own verify_path rules)."""
    plain = name.translate(_HFS_IGNORED).lower()
    plain = plain.split("::$index_allocation", 1)[0].split(":", 1)[0].rstrip(" .")
    return plain in (".git", "git~1")


def _sandbox_owner(work_tree: Path) -> tuple[int, int] | None:
    """The uid and gid a sandbox run as root gave the workspace when it opened (None:
    ours): what the host writes there later must be theirs too, or the model cannot
    edit it. The top directory is a bind mount point: the sandbox cannot swap it."""
    want = os.lstat(work_tree)
    if os.geteuid() != 0 or (want.st_uid, want.st_gid) == (os.geteuid(), os.getegid()):
        return None
    return want.st_uid, want.st_gid


def _give_to_owner_of(tree: Path, owner_of: Path) -> None:
    """Hand `tree` (host-made, so walked freely) to the sandbox that owns `owner_of`."""
    owner = _sandbox_owner(owner_of)
    if owner is None:
        return
    os.lchown(tree, *owner)
    for dirpath, dirnames, filenames in os.walk(tree, followlinks=False):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), *owner)


def _give_paths_to_owner_of(paths: Iterable[str], work_tree: Path) -> None:
    """Hand what git just checked out at `paths` (and the folders it made for them) to
    the sandbox that owns `work_tree`. Nothing in the sandbox runs meanwhile, and lchown
    never follows a link."""
    owner = _sandbox_owner(work_tree)
    if owner is None:
        return
    done: set[Path] = set()
    for path in paths:
        target = work_tree / path
        for entry in [target, *target.parents]:
            if entry == work_tree or entry in done:
                break
            done.add(entry)
            if os.path.lexists(entry):
                os.lchown(entry, *owner)


def same_noreply(author: str, email: str) -> bool:
    """Whether commit author `author` is `email`, also in the form GitHub gives commits
    it makes for an account through its API: `<id>+login@users.noreply.github.com` for
    `login@users.noreply.github.com` (the bot's commits made through the Git Data API)."""
    author, email = author.casefold(), email.casefold()
    if author == email:
        return True
    user_id, plus, rest = author.partition("+")
    return bool(plus) and user_id.isdigit() and rest == email \
        and email.endswith("@users.noreply.github.com")


class TreeRefused(GitError):
    """The work tree cannot be snapshotted safely (e.g. thousands of nested repositories)."""


def scan_nested_repos(work_tree: Path) -> tuple[list[str], list[str]]:
    """(dropped entries, directories to leave out) for every `.git` below the top level.

    A `.git` directory, file (`gitdir:` pointer) or symlink makes its parent a nested
    repository: the whole parent is left out, so git never looks inside. A name that is
    `.git` in another case or on another client's file system (`looks_like_dotgit`) is
    left out by itself (git refuses such paths). The walk never follows symlinks; the
    top-level `.git` is the sandbox's own and is never read.
    """
    dropped: list[str] = []
    excluded: list[str] = []
    top = os.fspath(work_tree)
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        rel = os.path.relpath(dirpath, top)
        rel = "" if rel == "." else rel.replace(os.sep, "/")
        if not rel:
            dirnames[:] = [name for name in dirnames if name != ".git"]
            filenames = [name for name in filenames if name != ".git"]
        names = dirnames + filenames
        if rel and ".git" in names:
            dropped.append(f"{rel}/.git")
            excluded.append(rel)
            dirnames[:] = []  # left out whole: nothing below matters
            continue
        for name in names:
            if looks_like_dotgit(name):
                path = f"{rel}/{name}" if rel else name
                dropped.append(path)
                excluded.append(path)
        dirnames[:] = [name for name in dirnames if not looks_like_dotgit(name)]
        if len(excluded) > MAX_NESTED_REPOS:
            raise TreeRefused(f"the work tree holds more than {MAX_NESTED_REPOS} nested git "
                              "repositories; it is not published")
    return sorted(dropped), sorted(excluded)


class HostRepo:
    """A host-owned git directory for one run, with the workspace as its work tree."""

    def __init__(self, git_dir: Path, work_tree: Path, base: str, *,
                 max_diff_bytes: int = DEFAULT_MAX_DIFF_BYTES) -> None:
        self.git_dir, self.work_tree, self.base = git_dir, work_tree, base
        self.max_diff_bytes = max_diff_bytes
        # The tree whose test files the verdict trusts: base, unless `distrust` put back
        # what the bot's own earlier commits did to them.
        self.test_base = base
        self.distrusted: tuple[str, str, Callable[[str], bool]] | None = None
        # The tree the setup phase runs on: base, unless `distrust_setup` put back every
        # change of the bot's own commits (no model-written file runs with network).
        self.setup_base = base
        # The work tree as setup left it, with the run's real start checked out
        # (`finish_setup`): the agent's change is measured from it, not from base.
        self.after_setup: str | None = None
        self.branch: str | None = None
        self.model_git_pending = False  # the model's `.git` is given after setup
        # Which repository this is (`create`'s source: the worker's mirror of one GitHub
        # repository, `solve`'s checkout): the setup cache's entries are per repository.
        self.source: Path | None = None

    # -- creation ---------------------------------------------------------------------
    @classmethod
    def open(cls, git_dir: Path, work_tree: Path, *,
             max_diff_bytes: int = DEFAULT_MAX_DIFF_BYTES) -> HostRepo:
        """A run's host directory made earlier by `create` (its HEAD is the base)."""
        base = run_git("rev-parse", "--verify", "HEAD^{commit}", git_dir=git_dir).decode()
        return cls(git_dir, work_tree, base.strip(), max_diff_bytes=max_diff_bytes)

    @classmethod
    def create(cls, source: Path, branch: str | None, git_dir: Path, work_tree: Path, *,
               max_diff_bytes: int = DEFAULT_MAX_DIFF_BYTES,
               model_git: bool = True) -> HostRepo:
        """Clone `source` (a bare mirror or the user's repository) into `git_dir`, check
        `branch` (None: source's HEAD) out into `work_tree` and give the work tree a
        writable `.git` of its own for the model. `model_git=False` (the run path): that
        `.git` comes with `finish_setup`, so the setup phase never sees it (it holds
        every branch).

        `git_dir` may hard-link the mirror's objects: it is never bound into the sandbox
        nor chowned. The work tree's `.git` is a copy (`--no-hardlinks`): the sandbox
        may chown and rewrite it, which must never reach the mirror.
        """
        git_dir.parent.mkdir(parents=True, exist_ok=True)
        clone = ["clone", "--bare", "--quiet", "--local"]
        if branch:
            clone += ["--branch", branch]
        run_git(*clone, "--", str(source), str(git_dir), cwd=git_dir.parent)
        run_git("remote", "remove", "origin", git_dir=git_dir)
        info = git_dir / "info"
        info.mkdir(exist_ok=True)
        (info / "attributes").write_text(NEUTRAL_ATTRIBUTES)
        (info / "exclude").write_text("# frognano\n" + GLOBAL_EXCLUDES)
        base = run_git("rev-parse", "--verify", "HEAD^{commit}", git_dir=git_dir).decode()
        repo = cls(git_dir, work_tree, base.strip(), max_diff_bytes=max_diff_bytes)
        repo.source = source.resolve()
        work_tree.mkdir(parents=True, exist_ok=False)
        repo._git("read-tree", "--reset", "-u", repo.base, work_tree=True)
        repo.branch = branch
        if model_git:
            repo._give_model_a_git_dir()
        else:
            repo.model_git_pending = True
        return repo

    def _give_model_a_git_dir(self) -> None:
        """The work tree's `.git`: a copy of the host's objects, HEAD on the run's branch,
        an index of base with the host index's stat data (`read-tree -m` keeps it where
        the file matches), so `git status` inside shows only what differs from base."""
        model_git = self.work_tree / ".git"
        remove_tree(model_git)  # whatever the setup phase left there is not ours to keep
        run_git("clone", "--bare", "--quiet", "--no-hardlinks", "--", str(self.git_dir),
                str(model_git), cwd=self.git_dir)
        for args in (("config", "core.bare", "false"), ("remote", "remove", "origin")):
            run_git(*args, git_dir=model_git)
        if self.branch:
            run_git("symbolic-ref", "HEAD", f"refs/heads/{self.branch}", git_dir=model_git)
        else:
            head = (self.git_dir / "HEAD").read_text()
            (model_git / "HEAD").write_text(head)
        index, nowhere = self._scratch("model.index"), self._scratch("no-work-tree")
        shutil.copyfile(self.git_dir / "index", index)
        nowhere.mkdir(exist_ok=True)  # read-tree -m asks for a work tree; it reads none
        run_git("read-tree", "-m", self.base, git_dir=self.git_dir, work_tree=nowhere,
                env={"GIT_INDEX_FILE": str(index)})
        shutil.copyfile(index, model_git / "index")
        index.unlink()
        info = model_git / "info"
        info.mkdir(exist_ok=True)
        (info / "exclude").write_text("# frognano\n" + GLOBAL_EXCLUDES)
        _give_to_owner_of(model_git, self.work_tree)

    # -- running git ------------------------------------------------------------------
    def _git(self, *args: str, work_tree: bool = False, index: Path | None = None,
             env: dict[str, str] | None = None, input_file: Path | None = None,
             strip: bool = True) -> bytes:
        extra = dict(env or {})
        if index is not None:
            extra["GIT_INDEX_FILE"] = str(index)
        return run_git(*args, git_dir=self.git_dir,
                       work_tree=self.work_tree if work_tree else None, env=extra,
                       input_file=input_file, strip=strip)

    def _scratch(self, name: str) -> Path:
        path = self.git_dir / "frognano-tmp"
        path.mkdir(exist_ok=True)
        return path / name

    # -- the change -------------------------------------------------------------------
    def snapshot(self, max_diff_bytes: int | None = None) -> Snapshot:
        """Stage the work tree into the host's own index and describe the change.

        Call it when no process can still write the tree (`Sandbox.stop()` first).
        """
        limit = self.max_diff_bytes if max_diff_bytes is None else max_diff_bytes
        final, dropped = self._stage()
        tree, setup_writes, overlap = self._agent_delta_on_base(final)
        paths = self.changed_paths(tree)
        diff, size, too_large = self._bounded_diff(tree, limit)
        return Snapshot(base=self.base, tree=tree, diff=diff, paths=paths, dropped=dropped,
                        diff_bytes=size, too_large=too_large, max_diff_bytes=limit,
                        links=self.links(tree), setup_writes=setup_writes,
                        setup_overlap=overlap)

    def _stage(self) -> tuple[str, list[str]]:
        """The work tree staged into the host's own index: its tree sha, and the nested
        repositories left out."""
        dropped, excluded = scan_nested_repos(self.work_tree)
        add = ["add", "--all"]
        if excluded:
            spec = self._scratch("pathspec")
            spec.write_bytes(b"".join(os.fsencode(f":(top,literal,exclude){path}") + b"\0"
                                      for path in excluded))
            add += [f"--pathspec-from-file={spec}", "--pathspec-file-nul"]
        self._git(*add, work_tree=True)
        return self._git("write-tree").decode().strip(), dropped

    def _agent_delta_on_base(self, final: str) -> tuple[str, list[str], list[str]]:
        """base + (final − after setup): what the agent phase changed, on base. A path
        setup wrote and the agent left alone goes back to base; one both changed stays as
        the agent left it. (tree, setup's paths left out, paths both changed)."""
        if self.after_setup is None or self.after_setup == self.base:
            return final, [], []
        by_setup = self.changed_paths(self.after_setup)
        by_agent = set(self.changed_paths(final, against=self.after_setup))
        left_out = [path for path in by_setup if path not in by_agent]
        at_base = self._ls_tree(self.base, left_out) if left_out else {}
        tree = self._tree_with(final, {path: at_base.get(path) for path in left_out})
        return tree, left_out, [path for path in by_setup if path in by_agent]

    # -- the setup phase --------------------------------------------------------------
    def distrust_setup(self, upstream: str, email: str) -> list[str]:
        """Check out the tree the setup phase may run: base with every change that a
        commit authored as `email` made since `upstream` put back (unless a person changed
        the path since), so what runs with network is the default branch plus people's
        commits, never a file the model wrote (its `setup.py`, a dynamic version that
        imports its package). Call it on a fresh work tree, before setup. The paths put
        back, sorted."""
        before = self._bot_changes(upstream, email, lambda _path: True)
        if before:
            self.setup_base = self._tree_with(self.base, before)
            self._git("read-tree", "--reset", "-u", self.setup_base, work_tree=True)
        return sorted(before)

    def finish_setup(self) -> list[str]:
        """After the setup phase: record the tree as setup left it, check the run's real
        start out over the paths `distrust_setup` put back (git's own checkout: a link
        setup left where a directory goes is replaced, never followed), and give the
        model its `.git`. The tracked paths setup wrote, sorted (never the model's)."""
        left, _dropped = self._stage()
        writes = self.changed_paths(left, against=self.setup_base)
        start = left
        if self.setup_base != self.base:
            own = self.changed_paths(self.base, against=self.setup_base)
            at_base = self._ls_tree(self.base, own)
            start = self._tree_with(left, {path: at_base.get(path) for path in own})
            self._git("read-tree", "--reset", "-u", start, work_tree=True)
            _give_paths_to_owner_of(own, self.work_tree)
        self.after_setup = start
        if self.model_git_pending:
            self._give_model_a_git_dir()
            self.model_git_pending = False
        return writes

    def links(self, tree: str) -> dict[str, str]:
        """The symlinks `tree` adds or changes against base, with their targets (read
        from the host's objects, never followed)."""
        out = self._git("diff-tree", "-r", "-z", "--no-renames", "--ignore-submodules=none",
                        self.base, tree, strip=False).split(b"\0")
        found = {}
        for meta, name in zip(out[0::2], out[1::2], strict=False):
            fields = meta.decode("ascii", "replace").split()
            if len(fields) >= 4 and fields[1] == "120000":
                target = self._git("cat-file", "blob", fields[3], strip=False)
                found[os.fsdecode(name)] = os.fsdecode(target[:4096])
        return found

    def tree_changes(self, old: str, new: str
                     ) -> list[tuple[str, str, str | None, str | None]]:
        """(path, its mode in `new` (in `old` where deleted), its object in `new` (None
        where `new` deletes it), its object in `old` (None where `new` adds it)) of each
        path `new` changes against `old` (commits or trees), from the host's objects:
        what a commit made through GitHub's API uploads."""
        out = self._git("diff-tree", "-r", "-z", "--no-renames", "--ignore-submodules=none",
                        old, new, strip=False).split(b"\0")
        changes: list[tuple[str, str, str | None, str | None]] = []
        for meta, name in zip(out[0::2], out[1::2], strict=False):
            fields = meta.decode("ascii", "replace").split()  # :old new old-sha new-sha X
            if len(fields) < 5:
                continue
            before = None if fields[4].startswith("A") else fields[2]
            if fields[4].startswith("D"):
                changes.append((os.fsdecode(name), fields[0].lstrip(":"), None, before))
            else:
                changes.append((os.fsdecode(name), fields[1], fields[3], before))
        return changes

    def object_bytes(self, sha: str) -> bytes:
        """A blob's bytes from the host's objects (a symlink's: its target, unfollowed)."""
        return self._git("cat-file", "blob", sha, strip=False)

    def object_head(self, sha: str, limit: int) -> bytes:
        """A blob's first `limit` bytes, read as a stream: a large binary the change adds
        is never in memory whole (policy.compiled_code reads its magic)."""
        argv = _argv(["cat-file", "blob", sha], git_dir=self.git_dir, work_tree=None,
                     env=None, user_config=False)
        proc = gitpython.Git(str(self.git_dir)).execute(argv, as_process=True)
        popen = proc.proc
        assert popen is not None  # as_process=True: the process was started
        head = b""
        try:
            while len(head) < limit:
                chunk = proc.stdout.read(limit - len(head))
                if not chunk:
                    break
                head += chunk
        finally:
            popen.kill()  # the rest is not read; a finished process ignores it
            popen.wait()
        return head

    def object_size(self, sha: str) -> int:
        return int(self._git("cat-file", "-s", sha).decode().strip())

    def tree_of(self, commit: str) -> str:
        return self._git("rev-parse", "--verify", f"{commit}^{{tree}}").decode().strip()

    def changed_paths(self, tree: str, against: str | None = None) -> list[str]:
        out = self._git("diff-tree", "-r", "-z", "--no-renames", "--name-only",
                        "--ignore-submodules=none", against or self.base, tree, strip=False)
        return sorted({os.fsdecode(name) for name in out.split(b"\0") if name})

    def numstat(self, tree: str) -> list[tuple[str, int | None, int | None]]:
        """(path, lines added, lines removed) of each changed path, for the PR body's size
        of the change; a binary file's counts are None (git counts no lines in it)."""
        out = self._git("diff-tree", "-r", "-z", "--no-renames", "--numstat",
                        "--ignore-submodules=none", self.base, tree, strip=False)
        stats = []
        for record in out.split(b"\0"):  # "added\tremoved\tpath" each, NUL-ended
            added, _, rest = record.partition(b"\t")
            removed, _, path = rest.partition(b"\t")
            if path:
                stats.append((os.fsdecode(path), int(added) if added != b"-" else None,
                              int(removed) if removed != b"-" else None))
        return stats

    def _bounded_diff(self, tree: str, limit: int) -> tuple[str, int, bool]:
        """The patch, read as a stream and abandoned past `limit`: never in memory whole."""
        argv = _argv(["diff", "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
                      "--ignore-submodules=none", "--src-prefix=a/", "--dst-prefix=b/",
                      self.base, tree, "--"],
                     git_dir=self.git_dir, work_tree=None, env=None, user_config=False)
        proc = gitpython.Git(str(self.git_dir)).execute(argv, as_process=True)
        popen = proc.proc
        assert popen is not None  # as_process=True: the process was started
        chunks, size = [], 0
        try:
            while size <= limit:
                chunk = proc.stdout.read(min(65536, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            too_large = size > limit
            if too_large:
                popen.kill()
            status = popen.wait()
            err = popen.stderr.read() if popen.stderr else b""
        if too_large:
            return "", size, True
        if status != 0:
            raise GitError(f"git diff failed: {err.decode('utf-8', 'replace').strip()}")
        return b"".join(chunks).decode("utf-8", "surrogateescape"), size, False

    def tree_with_base_paths(self, tree: str, paths: Iterable[str]) -> str:
        """`tree` with each of `paths` as it is in `test_base` (absent there: removed)."""
        wanted = sorted(set(paths))
        in_base = self._ls_tree(self.test_base, wanted) if wanted else {}
        return self._tree_with(tree, {path: in_base.get(path) for path in wanted})

    def distrust(self, upstream: str, email: str, select: Callable[[str], bool]) -> list[str]:
        """Set `test_base` for a run on a branch the bot itself wrote to (a review on its
        PR): every path `select` takes (test files and test configuration) that a commit
        authored as `email` changed on the first-parent line since `upstream`, as it was
        before that commit, unless a later commit by anyone else changed it again (a
        person's edit is trusted, the model's never). The paths put back, sorted."""
        self.distrusted = (upstream, email, select)
        before = self._bot_changes(upstream, email, select)
        if before:
            self.test_base = self._tree_with(self.base, before)
        return sorted(before)

    def _bot_changes(self, upstream: str, email: str, select: Callable[[str], bool]
                     ) -> dict[str, tuple[str, str] | None]:
        """Path → its entry before the first commit authored as `email` on base's
        first-parent line since `upstream` changed it (None: absent then), for each path
        `select` takes that no later commit by anyone else changed."""
        # A PR's own line is short; the cap keeps a branch without `upstream` (renamed
        # default branch) from walking a whole history.
        walk = ["log", "--first-parent", "--max-count=1000", "-z", "--format=%H %P%n%ae"]
        try:
            log = self._git(*walk, f"{upstream}..{self.base}", strip=False).decode()
        except GitError:  # no such upstream here: the branch's line, newest first
            log = self._git(*walk, self.base, strip=False).decode()
        before: dict[str, tuple[str, str] | None] = {}
        for record in reversed([r for r in log.split("\0") if r.strip()]):  # oldest first
            shas, _, author = record.strip("\n").partition("\n")
            sha, *parents = shas.split()
            parent = parents[0] if parents else _EMPTY_TREE
            changed = [p for p in self.changed_paths(sha, against=parent) if select(p)]
            mine = same_noreply(author.strip(), email)
            old = self._ls_tree(parent, changed) if mine and changed else {}
            for path in changed:
                if not mine:
                    before.pop(path, None)
                elif path not in before:
                    before[path] = old.get(path)
        return before

    def _tree_with(self, tree: str, entries: dict[str, tuple[str, str] | None]) -> str:
        """`tree` with each path of `entries` set to its (mode, sha), None: removed."""
        if not entries:
            return tree
        index = self._scratch("revert.index")
        index.unlink(missing_ok=True)
        self._git("read-tree", tree, index=index)
        lines = []
        for path, entry in sorted(entries.items()):
            if entry is not None:
                mode, sha = entry
                lines.append(f"{mode} {sha}\t{path}")
            else:
                lines.append(f"0 {_EMPTY_SHA}\t{path}")
        info = self._scratch("revert.info")
        info.write_bytes(b"".join(os.fsencode(line) + b"\0" for line in lines))
        self._git("update-index", "-z", "--index-info", index=index, input_file=info)
        return self._git("write-tree", index=index).decode().strip()

    def _ls_tree(self, treeish: str, paths: list[str]) -> dict[str, tuple[str, str]]:
        out = self._git("--literal-pathspecs", "ls-tree", "-r", "-z", "--full-tree", treeish,
                        "--", *paths, strip=False)
        entries = {}
        for record in out.split(b"\0"):
            if record:
                meta, _, name = record.partition(b"\t")
                mode, _kind, sha = meta.decode().split()
                entries[os.fsdecode(name)] = (mode, sha)
        return entries

    def base_paths(self) -> list[str]:
        out = self._git("ls-tree", "-r", "-z", "--name-only", "--full-tree", self.base,
                        strip=False)
        return [os.fsdecode(name) for name in out.split(b"\0") if name]

    def read_base(self, path: str) -> bytes | None:
        """A file's bytes at base (its tests: `test_base`), or None when it has no such
        blob."""
        entry = self._ls_tree(self.test_base, [path]).get(path)
        if entry is None or entry[0] == "160000":
            return None
        return self._git("cat-file", "blob", entry[1], strip=False)

    def read(self, tree: str, path: str) -> bytes | None:
        """A regular file's bytes in `tree`, from the host's objects (never a work tree);
        None when `tree` has no such path, or holds a symlink or gitlink there."""
        entry = self._ls_tree(tree, [path]).get(path)
        if entry is None or entry[0] in ("160000", "120000"):
            return None
        return self._git("cat-file", "blob", entry[1], strip=False)

    def materialize(self, tree: str, dest: Path) -> None:
        """Check `tree` out into `dest` (new or empty), byte for byte, with no `.git`."""
        dest.mkdir(parents=True, exist_ok=True)
        if any(dest.iterdir()):
            raise GitError(f"{dest} is not empty")
        index = self._scratch("materialize.index")
        index.unlink(missing_ok=True)
        run_git("read-tree", "--reset", "-u", tree, git_dir=self.git_dir, work_tree=dest,
                env={"GIT_INDEX_FILE": str(index)})
        index.unlink(missing_ok=True)

    def point_branch(self, branch: str, sha: str) -> None:
        """`refs/heads/<branch>` of the host's dir at `sha` (a commit it holds)."""
        self._git("update-ref", f"refs/heads/{branch}", sha)

    def commit(self, tree: str, branch: str, message: str,
               identity: Identity = LOCAL_IDENTITY) -> str:
        """A commit of `tree` on top of base, at `refs/heads/<branch>` of the host's dir."""
        name, email = identity
        who = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
               "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
        message_file = self._scratch("message")
        message_file.write_text(message, encoding="utf-8", errors="surrogateescape")
        sha = self._git("commit-tree", tree, "-p", self.base, "-F", str(message_file),
                        env=who).decode().strip()
        self._git("update-ref", f"refs/heads/{branch}", sha)
        return sha
