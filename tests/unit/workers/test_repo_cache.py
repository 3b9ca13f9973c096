"""Bare mirrors and workspaces on real git: the second issue does not download history again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from solver.hostgit import HostRepo
from tests.conftest import git, make_repo
from tests.support.paths import REPO_ROOT
from workers.repo_cache import RepoCache


def test_mirror_is_cloned_once_then_fetched(tmp_path: Path) -> None:
    upstream = make_repo(tmp_path / "upstream", {"a.py": "x = 1\n"})
    url = f"file://{upstream}"
    cache = RepoCache(tmp_path / "cache")
    mirror = cache.refresh(url, token=None)
    assert (mirror / "HEAD").exists()
    assert git(mirror, "remote").strip() == "", "no URL is stored in the mirror"
    first_inode = (mirror / "objects").stat().st_ino

    (upstream / "b.py").write_text("y = 2\n")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "second")
    assert cache.refresh(url, token=None) == mirror
    assert (mirror / "objects").stat().st_ino == first_inode, "fetched, not re-cloned"
    assert git(mirror, "rev-parse", "main") == git(upstream, "rev-parse", "main")

    workspace = tmp_path / "run" / "ws"
    host = HostRepo.create(mirror, "main", tmp_path / "run" / "git", workspace)
    assert host.base == git(upstream, "rev-parse", "main").strip()
    assert (workspace / "b.py").read_text() == "y = 2\n"
    assert git(workspace, "remote").strip() == ""
    assert "__pycache__/" in (workspace / ".git" / "info" / "exclude").read_text()
    # The model's .git is a copy: nothing in it shares an inode with the mirror.
    mirror_inodes = {p.stat().st_ino for p in (mirror / "objects").rglob("*") if p.is_file()}
    model_inodes = {p.stat().st_ino for p in (workspace / ".git").rglob("*") if p.is_file()}
    assert mirror_inodes and not mirror_inodes & model_inodes


def test_push_force_updates_the_bot_branch(tmp_path: Path) -> None:
    upstream = make_repo(tmp_path / "upstream", {"a.py": "x = 1\n"})
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(upstream), str(bare))
    cache = RepoCache(tmp_path / "cache")
    mirror = cache.refresh(f"file://{bare}", token=None)
    for content in ("x = 2\n", "x = 3\n"):
        run = tmp_path / f"run{content[4]}"
        host = HostRepo.create(mirror, "main", run / "git", run / "ws")
        (host.work_tree / "a.py").write_text(content)
        commit = host.commit(host.snapshot().tree, "frognano/issue-1", "fix")
        cache.push(host.git_dir, f"file://{bare}", commit, "frognano/issue-1", token=None)
        assert git(bare, "show", "frognano/issue-1:a.py") == content
    assert git(bare, "rev-parse", "main") == git(upstream, "rev-parse", "main")


REFRESH = """
import sys
from pathlib import Path
from workers.repo_cache import RepoCache
print(RepoCache(Path(sys.argv[1])).refresh(sys.argv[2], token=None))
"""


def test_run_workers_refreshing_one_new_mirror_at_once_all_get_it(tmp_path: Path) -> None:
    """Two run workers (processes) take the first issues of a repository at the same
    moment: one used to remove the other's half-made clone under it ("not a git
    repository"), and that run ended in error."""
    upstream = make_repo(tmp_path / "upstream", {f"f{i}.py": "x = 1\n" * 2000
                                                 for i in range(200)})
    url = f"file://{upstream}"
    workers = [subprocess.Popen([sys.executable, "-c", REFRESH, str(tmp_path / "cache"), url],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=REPO_ROOT) for _ in range(6)]
    results = [(w.wait(120), *w.communicate()) for w in workers]
    assert all(code == 0 for code, _, _ in results), [err for _, _, err in results]
    mirrors = {out.strip() for _, out, _ in results}
    assert len(mirrors) == 1
    assert git(Path(mirrors.pop()), "rev-parse", "main") == git(upstream, "rev-parse", "main")
