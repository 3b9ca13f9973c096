"""Host-side git on workspaces whose content the model controlled.

Uses the sandbox's hardening (no hooks, fsmonitor, external drivers, system
config or prompts): a workspace's files are untrusted, and its `.git` was
read-only inside the sandbox.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from sandbox.gitdiff import HARDENING, git_env

Identity = tuple[str, str]  # (name, email)
LOCAL_IDENTITY: Identity = ("FrogNano", "frognano-bot@users.noreply.github.com")


class GitError(RuntimeError):
    """A git command failed; the message carries git's own words."""


class GitMissing(GitError):
    """git itself cannot be run."""


def git(cwd: Path, *args: str, check: bool = True, identity: Identity | None = None,
        timeout: float = 600) -> str:
    who = ("-c", f"user.name={identity[0]}", "-c", f"user.email={identity[1]}") \
        if identity else ()
    argv = ["git", *HARDENING, *who, *args]
    try:
        proc = subprocess.run(argv, cwd=cwd, env=git_env(), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise GitMissing("git is not installed (or not on PATH); install it, e.g. "
                       "`apt-get install git`") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} took longer than {timeout:.0f}s") from None
    if check and proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip()
        raise GitError(f"git {args[0]} failed: {message}")
    return proc.stdout


# Build outputs and caches that must never reach a commit, even when the
# repository's own .gitignore forgets them. Only untracked files are affected.
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


def add_global_excludes(workspace: Path) -> None:
    info = workspace / ".git" / "info"
    info.mkdir(parents=True, exist_ok=True)
    exclude = info / "exclude"
    existing = exclude.read_text() if exclude.exists() else ""
    if GLOBAL_EXCLUDES not in existing:
        exclude.write_text(existing.rstrip("\n") + "\n# frognano\n" + GLOBAL_EXCLUDES)
