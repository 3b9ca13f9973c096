"""Bare mirrors per repository, fresh workspaces cloned from them, and pushing.

The installation token only ever reaches git through an askpass helper's
environment on the host: never in a URL, an argument, a file or the
workspace's `.git/config`, and never inside the sandbox.
"""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
from pathlib import Path

from sandbox.gitdiff import HARDENING, git_env
from workers.gitops import GitError, add_global_excludes, git

TOKEN_ENV = "FROGNANO_GIT_TOKEN"
ASKPASS = f"""#!/bin/sh
case "$1" in
  Username*) echo x-access-token ;;
  *) printf '%s\\n' "${TOKEN_ENV}" ;;
esac
"""


def _askpass(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "askpass.sh"
    if not path.exists() or path.read_text() != ASKPASS:
        path.write_text(ASKPASS)
    path.chmod(stat.S_IRWXU)
    return path


def _redact(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


class RepoCache:
    """Mirrors under `root/mirrors/HOST/OWNER/NAME.git`; the askpass helper under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.askpass = _askpass(root)

    def mirror_path(self, url: str) -> Path:
        host_and_path = re.sub(r"^[a-z+]+://", "", url).removesuffix(".git")
        safe = re.sub(r"[^A-Za-z0-9._/-]", "_", host_and_path).strip("/")
        return self.root / "mirrors" / f"{safe}.git"

    def _remote_git(self, cwd: Path, args: list[str], token: str | None,
                    timeout: float = 1800) -> str:
        """git talking to a remote, with the token offered only through askpass."""
        env = git_env()
        env.update({"GIT_ASKPASS": str(self.askpass), "GIT_TERMINAL_PROMPT": "0"})
        if token:
            env[TOKEN_ENV] = token
        argv = ["git", *HARDENING, "-c", "credential.helper=", "-c",
                "core.askPass=" + str(self.askpass), *args]
        try:
            proc = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} timed out after {timeout:.0f}s") from None
        if proc.returncode != 0:
            raise GitError(f"git {args[0]} failed: {_redact(proc.stderr.strip(), token)}")
        return proc.stdout

    def refresh(self, url: str, token: str | None) -> Path:
        """The mirror of `url`, cloned once and then only fetched."""
        mirror = self.mirror_path(url)
        if (mirror / "HEAD").exists():
            self._remote_git(mirror, ["fetch", "--prune", "--quiet", url,
                                      "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
                             token)
        else:
            mirror.parent.mkdir(parents=True, exist_ok=True)
            partial = mirror.with_suffix(".partial")
            if partial.exists():
                shutil.rmtree(partial)
            self._remote_git(mirror.parent, ["clone", "--bare", "--quiet", url, str(partial)],
                             token)
            # No remote recorded in the mirror: the URL is passed on every fetch instead.
            git(partial, "remote", "remove", "origin", check=False)
            partial.rename(mirror)
        return mirror

    def workspace(self, mirror: Path, branch: str, dest: Path) -> str:
        """A fresh clone of `branch` from the local mirror; returns its HEAD commit.

        Objects are hard-linked, not copied: they are immutable, the sandbox sees `.git`
        read-only and never chowns it, so the mirror cannot be changed through the links.
        """
        git(mirror.parent, "clone", "--quiet", "--local", "--branch", branch,
            str(mirror), str(dest))
        git(dest, "remote", "remove", "origin")
        add_global_excludes(dest)
        return git(dest, "rev-parse", "HEAD").strip()

    def push(self, workspace: Path, url: str, branch: str, token: str | None) -> None:
        """Force-push HEAD of the workspace to `branch` (the bot owns frognano/ branches)."""
        self._remote_git(workspace, ["push", "--force", "--quiet", url,
                                     f"HEAD:refs/heads/{branch}"], token)
