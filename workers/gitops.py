"""Host-side git, hardened for workspaces whose content the model controlled.

A workspace's files are untrusted: nothing in them may make the host's git run
code (hooks, fsmonitor) or prompt. Its `.git` was read-only inside the sandbox,
and ownership may differ after the sandbox chowned it, hence safe.directory.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

HARDENING = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "safe.directory=*",
    "-c", "core.pager=cat",
    "-c", "credential.helper=",
)

BOT_IDENTITY = (
    "-c", "user.name=FrogNano",
    "-c", "user.email=frognano-bot@users.noreply.github.com",
)


class GitError(RuntimeError):
    """A git command failed; the message carries git's own words."""


def git(cwd: Path, *args: str, check: bool = True, identity: bool = False,
        timeout: float = 600) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/nonexistent"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
    }
    argv = ["git", *HARDENING, *(BOT_IDENTITY if identity else ()), *args]
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
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
