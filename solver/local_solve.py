"""`frognano solve` on a local repository: never touches the user's working tree.

The repository's objects are cloned into a host-owned git directory of the run
(`solver/hostgit.py`), HEAD is checked out into a private workspace; the agent
works there; when the tests pass the host commits the snapshot's tree on a new
branch `frognano/<slug>` in its own git directory, and the user's repository
fetches that branch only.
"""

from __future__ import annotations

import re
from pathlib import Path

from solver.hostgit import LOCAL_IDENTITY, GitError, GitMissing, HostRepo, run_git
from solver.run import OwnCommits


class LocalRepoError(ValueError):
    """The path cannot be solved on as it is; the message says why and what to do."""


def _user_git(repo: Path, *args: str) -> str:
    """git in the user's own repository: their config applies, nothing of ours leaks in."""
    return run_git(*args, cwd=repo, user_config=True).decode("utf-8", "replace")


def check_repository(path: Path) -> Path:
    """The top level of a clean git repository with at least one commit."""
    if not path.exists():
        raise LocalRepoError(f"{path} does not exist")
    if not path.is_dir():
        raise LocalRepoError(f"{path} is not a directory")
    try:
        top = Path(_user_git(path, "rev-parse", "--show-toplevel").strip())
    except GitMissing:
        raise
    except GitError:
        raise LocalRepoError(f"{path} is not a git repository (run `git init` and commit "
                             "your code first)") from None
    try:
        _user_git(top, "rev-parse", "--verify", "HEAD")
    except GitError:
        raise LocalRepoError(f"{top} has no commits yet; commit your code first") from None
    dirty = _user_git(top, "status", "--porcelain", "--untracked-files=normal").strip()
    if dirty:
        listing = "\n".join("  " + line for line in dirty.splitlines()[:10])
        raise LocalRepoError(
            f"{top} has uncommitted changes; commit or stash them first, because the "
            f"agent works on a clean copy of HEAD:\n{listing}")
    return top


# Where a `frognano/*` branch most likely came from, when origin/HEAD does not say.
_USUAL_DEFAULTS = ("main", "master", "trunk", "develop")


def own_commits(repo: Path) -> OwnCommits | None:
    """For a checkout of a branch `solve` made (`frognano/*`): its commits authored as
    `solve` commits them are the model's, counted since the repository's default branch
    (origin/HEAD, else the first of main, master, trunk, develop that exists; with none,
    `HostRepo.distrust` walks the branch's own line). None on any other branch."""
    try:
        branch = _user_git(repo, "symbolic-ref", "--quiet", "--short", "HEAD").strip()
    except GitError:  # a detached HEAD: no branch of ours
        return None
    if not branch.startswith("frognano/"):
        return None
    heads = set(_user_git(repo, "for-each-ref", "--format=%(refname:short)",
                          "refs/heads/").split())
    try:
        remote = _user_git(repo, "symbolic-ref", "--quiet", "--short",
                           "refs/remotes/origin/HEAD").strip().removeprefix("origin/")
    except GitError:
        remote = ""
    default = next((name for name in (remote, *_USUAL_DEFAULTS) if name in heads
                    and name != branch), None)
    return OwnCommits(f"refs/heads/{default}" if default else "refs/frognano/no-upstream",
                      LOCAL_IDENTITY[1])


def slugify(text: str, limit: int = 40) -> str:
    first_line = next((line for line in text.splitlines() if line.strip()), "fix")
    slug = re.sub(r"[^a-z0-9]+", "-", first_line.lower()).strip("-")
    return slug[:limit].rstrip("-") or "fix"


def unique_branch(repo: Path, slug: str) -> str:
    existing = set(_user_git(repo, "for-each-ref", "--format=%(refname:short)",
                             "refs/heads/frognano/").split())
    branch, n = f"frognano/{slug}", 2
    while branch in existing:
        branch, n = f"frognano/{slug}-{n}", n + 1
    return branch


def bring_back(repo: Path, host: HostRepo, branch: str) -> None:
    """Create `branch` in the user's repository from the host's git directory; their HEAD
    and working tree stay as they are, and the workspace is never read."""
    _user_git(repo, "fetch", "--quiet", "--no-tags", "--", str(host.git_dir),
              f"refs/heads/{branch}:refs/heads/{branch}")
