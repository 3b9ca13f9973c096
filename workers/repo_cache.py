"""Bare mirrors per repository, and the remote talk: fetching into them and into runs.

Only remote operations live here; everything on a workspace goes through
`solver/hostgit.py`, whose hardened runner these commands share. The installation
token only ever reaches git through an askpass helper's environment on the host:
never in a URL, an argument, a file or any `.git/config`, and never inside the sandbox.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import stat
from pathlib import Path

from solver.hostgit import run_git

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


class RepoCache:
    """Mirrors under `root/mirrors/HOST/OWNER/NAME.git`; the askpass helper under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.askpass = _askpass(root)

    def mirror_path(self, url: str) -> Path:
        host_and_path = re.sub(r"^[a-z+]+://", "", url).removesuffix(".git")
        safe = re.sub(r"[^A-Za-z0-9._/-]", "_", host_and_path).strip("/")
        return self.root / "mirrors" / f"{safe}.git"

    def _remote_git(self, args: list[str], token: str | None, *, git_dir: Path | None = None,
                    cwd: Path | None = None, timeout: float = 1800) -> str:
        """git talking to a remote, with the token offered only through askpass."""
        env = {"GIT_ASKPASS": str(self.askpass)}
        if token:
            env[TOKEN_ENV] = token
        out = run_git("-c", f"core.askPass={self.askpass}", *args, git_dir=git_dir, cwd=cwd,
                      env=env, timeout=timeout, redact=token)
        return out.decode("utf-8", "replace")

    def refresh(self, url: str, token: str | None) -> Path:
        """The mirror of `url`, cloned once and then only fetched. Run workers on one host
        share the mirrors: a lock per mirror lets one clone or fetch at a time (two first
        runs of a repository each removed the other's half-made clone)."""
        mirror = self.mirror_path(url)
        mirror.parent.mkdir(parents=True, exist_ok=True)
        with open(mirror.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            return self._refresh_locked(mirror, url, token)

    def _refresh_locked(self, mirror: Path, url: str, token: str | None) -> Path:
        if (mirror / "HEAD").exists():
            self._remote_git(["fetch", "--prune", "--quiet", url,
                              "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
                             token, git_dir=mirror)
        else:
            partial = mirror.with_suffix(".partial")
            if partial.exists():
                shutil.rmtree(partial)
            self._remote_git(["clone", "--bare", "--quiet", "--", url, str(partial)], token,
                             cwd=mirror.parent)
            # No remote recorded in the mirror: the URL is passed on every fetch instead.
            run_git("remote", "remove", "origin", git_dir=partial)
            partial.rename(mirror)
        return mirror

    def push(self, git_dir: Path, url: str, commit: str, branch: str,
             token: str | None, *, force: bool = True) -> None:
        """Push `commit` from a run's host-owned git directory to `branch`: forced, or
        fast-forward only. The workspace and its `.git` are never involved. Publishing on
        GitHub no longer pushes with git (its commits are made through GitHub's API so
        that GitHub signs them: workers/publish/api_commit.py); this stays for a plain
        git remote (the hostile git scenarios publish to a local bare repository)."""
        self._remote_git(["push", *(["--force"] if force else []), "--quiet", url,
                          f"{commit}:refs/heads/{branch}"], token, git_dir=git_dir)

    def fetch_branch(self, git_dir: Path, url: str, branch: str, token: str | None) -> str:
        """The remote `branch`'s head, fetched into a run's host-owned git directory."""
        ref = "refs/frognano/remote-head"
        self._remote_git(["fetch", "--quiet", url, f"+refs/heads/{branch}:{ref}"], token,
                         git_dir=git_dir)
        return run_git("rev-parse", "--verify", f"{ref}^{{commit}}",
                       git_dir=git_dir).decode().strip()
