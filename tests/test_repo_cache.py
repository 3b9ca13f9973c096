"""Bare mirrors and workspaces on real git: the second issue does not download history again."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import git, make_repo
from workers.hostgit import HostRepo
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
