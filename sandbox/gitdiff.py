"""The run's patch, computed on the host from an untrusted workspace.

Everything under the workspace was written by the model or by the repository's own
setup/test commands, so git runs with nothing there able to make it execute code or
change the patch format: no hooks, no fsmonitor, no external diff or textconv drivers,
no system config, no pager, no colour.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sandbox.base import SandboxError

HARDENING = [
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "safe.directory=*",  # the workspace belongs to the sandbox uid, not to us
    "-c", "core.pager=cat",
    "-c", "color.ui=false",
    "-c", "diff.noprefix=false",
    "-c", "diff.mnemonicPrefix=false",
    "-c", "diff.relative=false",
]
GIT_TIMEOUT_SECONDS = 300


def git_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_PAGER": "cat", "PAGER": "cat",
                "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})
    return env


def _git(workspace: Path, *args: str, extra: list[str]) -> bytes:
    try:
        done = subprocess.run(
            ["git", *HARDENING, *extra, *args], cwd=workspace, env=git_env(),
            stdin=subprocess.DEVNULL, capture_output=True, timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxError(f"git {args[0]} failed in {workspace}: {exc}") from exc
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip()
        raise SandboxError(f"git {args[0]} failed in {workspace}: {message}")
    return done.stdout


def workspace_diff(workspace: Path, *, exclude_file: Path | None = None) -> str:
    """`git add -A && git diff --cached --binary` of the workspace.

    `exclude_file` is a global ignore list (caches, virtualenvs) applied on top of the
    repository's own .gitignore. The text is decoded with surrogateescape, so
    `diff.encode("utf-8", "surrogateescape")` gives back git's exact bytes.
    """
    extra = ["-c", f"core.excludesFile={exclude_file}"] if exclude_file else []
    _git(workspace, "add", "-A", extra=extra)
    patch = _git(workspace, "diff", "--cached", "--binary", "--no-color", "--no-ext-diff",
                 "--no-textconv", extra=extra)
    return patch.decode("utf-8", "surrogateescape")
