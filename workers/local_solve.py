"""`frognano solve` on a local repository: never touches the user's working tree.

The repository is cloned into a private workspace; the agent works there; when
the tests pass the result is committed on a new branch `frognano/<slug>` and
fetched back into the user's repository as that branch only.
"""

from __future__ import annotations

import re
from pathlib import Path

from workers.gitops import (
    LOCAL_IDENTITY,
    GitError,
    GitMissing,
    Identity,
    add_global_excludes,
    git,
)


class LocalRepoError(ValueError):
    """The path cannot be solved on as it is; the message says why and what to do."""


def check_repository(path: Path) -> Path:
    """The top level of a clean git repository with at least one commit."""
    if not path.exists():
        raise LocalRepoError(f"{path} does not exist")
    if not path.is_dir():
        raise LocalRepoError(f"{path} is not a directory")
    try:
        top = Path(git(path, "rev-parse", "--show-toplevel").strip())
    except GitMissing:
        raise
    except GitError:
        raise LocalRepoError(f"{path} is not a git repository (run `git init` and commit "
                             "your code first)") from None
    try:
        git(top, "rev-parse", "--verify", "HEAD")
    except GitError:
        raise LocalRepoError(f"{top} has no commits yet; commit your code first") from None
    dirty = git(top, "status", "--porcelain", "--untracked-files=normal").strip()
    if dirty:
        listing = "\n".join("  " + line for line in dirty.splitlines()[:10])
        raise LocalRepoError(
            f"{top} has uncommitted changes; commit or stash them first, because the "
            f"agent works on a clean copy of HEAD:\n{listing}")
    return top


def clone_workspace(repo: Path, workspace: Path) -> str:
    """Clone HEAD of `repo` into `workspace` (own object copies: the sandbox may chown them)."""
    git(repo.parent, "clone", "--quiet", "--no-hardlinks", str(repo), str(workspace))
    add_global_excludes(workspace)
    return git(workspace, "rev-parse", "HEAD").strip()


def slugify(text: str, limit: int = 40) -> str:
    first_line = next((line for line in text.splitlines() if line.strip()), "fix")
    slug = re.sub(r"[^a-z0-9]+", "-", first_line.lower()).strip("-")
    return slug[:limit].rstrip("-") or "fix"


def unique_branch(repo: Path, slug: str) -> str:
    existing = set(git(repo, "for-each-ref", "--format=%(refname:short)",
                       "refs/heads/frognano/").split())
    branch, n = f"frognano/{slug}", 2
    while branch in existing:
        branch, n = f"frognano/{slug}-{n}", n + 1
    return branch


def commit_on_branch(workspace: Path, branch: str, message: str,
                     identity: Identity = LOCAL_IDENTITY) -> str:
    git(workspace, "checkout", "--quiet", "-B", branch)
    git(workspace, "add", "-A")
    git(workspace, "commit", "--quiet", "--no-verify", "-m", message, identity=identity)
    return git(workspace, "rev-parse", "HEAD").strip()


def bring_back(repo: Path, workspace: Path, branch: str) -> None:
    """Create `branch` in the user's repository; their HEAD and working tree stay as they are."""
    git(repo, "fetch", "--quiet", "--no-tags", str(workspace), f"{branch}:refs/heads/{branch}")
