"""Workspace preparation: the second issue on a repository must not download its history
again. A 2,000-commit repository is served over git smart HTTP with token auth by the
local fake GitHub; the first issue clones the bare mirror, the second only fetches (one
new commit) — each then prepares its run from the local mirror: the host's own git
directory (hard links) and the workspace with the sandbox's own `.git` (a copy).

    python -m bench.workspace_prep
"""

from __future__ import annotations

import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from solver.hostgit import HostRepo
from tests.support.fake_github.server import FakeGitHub
from workers.repo_cache import RepoCache

COMMITS = 2_000
TARGET_RATIO = 0.20


def _big_repo(path: Path, commits: int) -> Path:
    """`commits` commits touching 50 files, written in one `git fast-import` stream."""
    random.seed(0)
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=path, check=True)
    lines = []
    for n in range(commits):
        body = f"commit {n}\n".encode()
        # Incompressible, like real history: ~15 MB of objects, a modest real repository.
        content = f"value = {n}\n" + random.randbytes(6000).hex() + "\n"
        lines.append(b"commit refs/heads/main\n")
        lines.append(f"committer Bench <b@example.com> {1_700_000_000 + n} +0000\n".encode())
        lines.append(f"data {len(body)}\n".encode() + body)
        data = content.encode()
        lines.append(f"M 644 inline src/module_{n % 50}.py\ndata {len(data)}\n".encode()
                     + data + b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=path, input=b"".join(lines),
                   check=True)
    subprocess.run(["git", "checkout", "-q", "main"], cwd=path, check=True)
    return path


def _prepare(cache: RepoCache, fake: FakeGitHub, dest: Path) -> float:
    started = time.perf_counter()
    token = fake.mint_token(fake.installation_id).token
    mirror = cache.refresh(fake.clone_url("bench", "big"), token)
    HostRepo.create(mirror, "main", dest / "git", dest / "workspace")
    return time.perf_counter() - started


def run() -> list[dict[str, Any]]:
    root = Path(tempfile.mkdtemp(prefix="frognano-bench-ws-"))
    try:
        source = _big_repo(root / "source", COMMITS)
        with FakeGitHub(root / "github", validate_openapi=False) as fake:
            repo = fake.add_repo("bench", "big", source)
            cache = RepoCache(root / "cache")
            first = _prepare(cache, fake, root / "ws1")
            # A new commit lands upstream between the two issues.
            subprocess.run(["git", "-c", "user.name=B", "-c", "user.email=b@e", "commit", "-q",
                            "--allow-empty", "-m", "later"], cwd=source, check=True)
            subprocess.run(["git", "push", "-q", str(repo.bare_path), "main"], cwd=source,
                           check=True)
            second = _prepare(cache, fake, root / "ws2")
            pack_mb = sum(f.stat().st_size for f in (
                cache.mirror_path(fake.clone_url("bench", "big")) / "objects").rglob("*")
                if f.is_file()) / 1e6
        ratio = second / first
        return [
            {"name": f"first issue: mirror clone + workspace ({COMMITS} commits, "
                     f"{pack_mb:.0f} MB of objects, smart HTTP on loopback)",
             "value": first * 1000, "unit": "ms", "target": "", "ok": None},
            {"name": "second issue: fetch + workspace", "value": second * 1000, "unit": "ms",
             "target": "", "ok": None},
            {"name": "second ÷ first", "value": ratio, "unit": "×",
             "target": f"≤ {TARGET_RATIO}", "ok": ratio <= TARGET_RATIO},
        ]
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    for row in run():
        print(row)
