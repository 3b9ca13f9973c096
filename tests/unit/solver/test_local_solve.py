"""The local-repository side of `frognano solve`, on real git repositories."""

from __future__ import annotations

from pathlib import Path

import pytest

from solver.local_solve import (
    LocalRepoError,
    bring_back,
    check_repository,
    slugify,
    unique_branch,
)
from solver.run import open_workspace
from tests.conftest import git, make_repo


def test_rejects_what_is_not_a_clean_repository(tmp_path: Path) -> None:
    with pytest.raises(LocalRepoError, match="does not exist"):
        check_repository(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(LocalRepoError, match="is not a git repository"):
        check_repository(tmp_path / "plain")
    git(tmp_path / "plain", "init", "-q")
    with pytest.raises(LocalRepoError, match="has no commits yet"):
        check_repository(tmp_path / "plain")
    repo = make_repo(tmp_path / "repo", {"a.py": "x = 1\n"})
    (repo / "a.py").write_text("x = 2\n")
    (repo / "new.txt").write_text("new")
    with pytest.raises(LocalRepoError, match="uncommitted changes") as caught:
        check_repository(repo)
    assert "a.py" in str(caught.value) and "new.txt" in str(caught.value)


def test_subdirectory_resolves_to_top_level(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"pkg/a.py": "x = 1\n"})
    assert check_repository(repo / "pkg") == repo.resolve()


def test_workspace_round_trip_leaves_the_users_branch_alone(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.py": "x = 1\n"})
    head = git(repo, "rev-parse", "HEAD").strip()
    host = open_workspace(repo, None, tmp_path / "run")  # as `frognano solve` does
    workspace = host.work_tree
    assert host.base == head and workspace == tmp_path / "run" / "workspace"
    assert not (workspace / ".git").exists(), "setup never sees the model's .git"
    host.finish_setup()  # as the harness does after setup: the model gets its .git
    exclude = (workspace / ".git" / "info" / "exclude").read_text()
    assert "__pycache__/" in exclude and "node_modules/" in exclude
    assert git(workspace, "status", "--porcelain") == "", "the model's .git sees a clean tree"

    (workspace / "a.py").write_text("x = 2\n")
    (workspace / "__pycache__").mkdir()
    (workspace / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    branch = unique_branch(repo, slugify("Fix: x should be 2!"))
    assert branch == "frognano/fix-x-should-be-2"
    snapshot = host.snapshot()
    assert snapshot.paths == ["a.py"], "caches must never reach the commit"
    commit = host.commit(snapshot.tree, branch, "Fix x")
    bring_back(repo, host, branch)

    assert git(repo, "rev-parse", branch).strip() == commit
    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert git(repo, "symbolic-ref", "--short", "HEAD").strip() == "main"
    assert (repo / "a.py").read_text() == "x = 1\n"
    files = git(repo, "ls-tree", "-r", "--name-only", branch).split()
    assert files == ["a.py"], "caches must never reach the commit"
    author = git(repo, "log", "-1", "--format=%an <%ae>", branch).strip()
    assert author == "FrogNano <frognano-bot@users.noreply.github.com>"
    assert unique_branch(repo, "fix-x-should-be-2") == "frognano/fix-x-should-be-2-2"


@pytest.mark.parametrize(
    ("text", "slug"),
    [("Add() returns the wrong sign\n\nbody", "add-returns-the-wrong-sign"),
     ("\n\n  ", "fix"), ("###", "fix"), ("x" * 80, "x" * 40)],
)
def test_slugify(text: str, slug: str) -> None:
    assert slugify(text) == slug
