"""A run's commit made on the fake GitHub through the Git Data API from the host's own
git directory (workers/publish/api_commit.py): only what changed is uploaded, GitHub's
tree is the snapshot's, and the publish policy holds on exactly what is sent."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.github_api import RepoRef
from bot.github_client import GitHubAppClient
from solver.hostgit import HostRepo
from tests.conftest import git
from tests.support.fake_github.server import FakeGitHub
from workers.publish.api_commit import UploadRefused, create_commit, force_branch
from workers.repo_cache import RepoCache

OWNER, NAME = "octo", "calc"
FILES = {"calc.py": "def add(a, b):\n    return a - b\n", "README.md": "calc\n",
         "old.txt": "to be deleted\n", "run.sh": "echo hi\n"}


@dataclass
class Run:
    fake: FakeGitHub
    github: GitHubAppClient
    repo: RepoRef
    host: HostRepo

    def blobs_sent(self) -> int:
        return sum(1 for r in self.fake.requests if r.path.endswith("/git/blobs"))


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    with FakeGitHub(tmp_path / "github") as fake:
        fake.add_repo(OWNER, NAME, FILES)
        github = GitHubAppClient(fake.app_id, fake.private_key_pem, fake.api_url)
        repo = RepoRef(OWNER, NAME, fake.installation_id)
        mirror = RepoCache(tmp_path / "cache").refresh(github.clone_url(repo),
                                                       github.installation_token(repo))
        host = HostRepo.create(mirror, "main", tmp_path / "run" / "git",
                               tmp_path / "run" / "workspace")
        yield Run(fake, github, repo, host)
    assert not fake.violations, "\n".join(fake.violations)


def test_only_the_changed_paths_are_sent_and_github_holds_the_snapshot(run: Run) -> None:
    work = run.host.work_tree
    (work / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (work / "old.txt").unlink()
    (work / "pkg" / "deep").mkdir(parents=True)
    (work / "pkg" / "deep" / "new.bin").write_bytes(bytes(range(256)) * 4)
    (work / "pkg" / "same.py").write_text("def add(a, b):\n    return a + b\n")  # same blob
    os.chmod(work / "run.sh", 0o755)
    os.symlink("calc.py", work / "link.py")
    snapshot = run.host.snapshot()
    sha = create_commit(run.github, run.repo, run.host, tree=snapshot.tree,
                        parent=run.host.base, message="fix add\n\nFixes #1.")
    bare = run.fake.repo(OWNER, NAME).bare_path
    assert git(bare, "rev-parse", f"{sha}^{{tree}}").strip() == snapshot.tree
    assert git(bare, "rev-parse", f"{sha}^").strip() == run.host.base
    # calc.py and pkg/same.py share one blob, new.bin and the link one each; the mode
    # change and the deletion send none: 3 blobs, one tree, one commit.
    assert run.blobs_sent() == 3
    assert [r.path.rsplit("/", 1)[-1] for r in run.fake.requests
            if r.kind == "api" and r.method == "POST"] == ["blobs"] * 3 + ["trees", "commits"]
    tree_request = next(r for r in run.fake.requests if r.path.endswith("/git/trees"))
    sent = {e["path"]: e for e in tree_request.body["tree"]}
    assert sent["old.txt"]["sha"] is None and sent["run.sh"]["mode"] == "100755"
    assert sent["link.py"]["mode"] == "120000" and "README.md" not in sent
    assert tree_request.body["base_tree"] == run.host.tree_of(run.host.base)


def test_a_tree_github_holds_other_than_the_tested_one_is_never_committed(run: Run) -> None:
    """GitHub's tree must be the snapshot's byte for byte: one that lost the change (as a
    base_tree merge GitHub reads otherwise would) is refused before any commit is made."""
    (run.host.work_tree / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    snapshot = run.host.snapshot()
    parent_tree = run.host.tree_of(run.host.base)
    api = f"{run.fake.api_url}/repos/{OWNER}/{NAME}/git"
    run.fake.answer_next("POST", r"/git/trees$", 201, {
        "sha": parent_tree, "url": f"{api}/trees/{parent_tree}", "tree": [],
        "truncated": False})
    with pytest.raises(UploadRefused, match="not the tested tree"):
        create_commit(run.github, run.repo, run.host, tree=snapshot.tree,
                      parent=run.host.base, message="fix add")
    assert not [r for r in run.fake.requests if r.path.endswith("/git/commits")]


def test_a_blob_github_stores_under_another_sha_stops_the_upload(run: Run) -> None:
    (run.host.work_tree / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    snapshot = run.host.snapshot()
    other = "0" * 40
    run.fake.answer_next("POST", r"/git/blobs$", 201, {
        "sha": other, "url": f"{run.fake.api_url}/repos/{OWNER}/{NAME}/git/blobs/{other}"})
    with pytest.raises(UploadRefused, match=r"calc\.py"):
        create_commit(run.github, run.repo, run.host, tree=snapshot.tree,
                      parent=run.host.base, message="fix add")
    assert not [r for r in run.fake.requests if r.path.endswith(("/git/trees", "/git/commits"))]


def test_a_workflow_is_never_uploaded_even_past_the_snapshot_check(run: Run) -> None:
    """create_commit checks the paths it sends itself (a replayed tree reaches it
    without a Snapshot): nothing at all is sent."""
    workflows = run.host.work_tree / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "ci.yml").write_text("on: push\n")
    snapshot = run.host.snapshot()
    with pytest.raises(UploadRefused, match="workflow"):
        create_commit(run.github, run.repo, run.host, tree=snapshot.tree,
                      parent=run.host.base, message="x")
    assert run.blobs_sent() == 0


def test_a_link_standing_in_for_the_workflows_folder_is_refused(run: Run) -> None:
    os.symlink("ci", run.host.work_tree / ".github")
    snapshot = run.host.snapshot()
    with pytest.raises(UploadRefused):
        create_commit(run.github, run.repo, run.host, tree=snapshot.tree,
                      parent=run.host.base, message="x")
    assert run.blobs_sent() == 0


def test_an_upload_larger_than_its_bound_sends_nothing(run: Run) -> None:
    """A file that compresses to a small patch is still its whole size to upload."""
    run.host.max_diff_bytes = 1000  # the bound: 10 × the patch limit, 10 kB here
    (run.host.work_tree / "zeros.bin").write_bytes(bytes(20_000))
    snapshot = run.host.snapshot(max_diff_bytes=100_000)
    with pytest.raises(UploadRefused, match="bytes"):
        create_commit(run.github, run.repo, run.host, tree=snapshot.tree,
                      parent=run.host.base, message="x")
    assert run.blobs_sent() == 0


def test_force_branch_creates_then_moves_an_existing_branch(run: Run) -> None:
    (run.host.work_tree / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    first = create_commit(run.github, run.repo, run.host, tree=run.host.snapshot().tree,
                          parent=run.host.base, message="one")
    force_branch(run.github, run.repo, "frognano/issue-1", first)
    (run.host.work_tree / "calc.py").write_text("def add(a, b):\n    return b + a\n")
    second = create_commit(run.github, run.repo, run.host, tree=run.host.snapshot().tree,
                           parent=run.host.base, message="two")  # not on top of `first`
    force_branch(run.github, run.repo, "frognano/issue-1", second)
    assert run.fake.branch_sha(OWNER, NAME, "frognano/issue-1") == second
