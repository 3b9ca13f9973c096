"""A first run's PR on the fake GitHub (workers/publish/pull.py): the draft PR carries
`frognano:unverified` while no test fails without its change, and loses it when a later
run's change shows that evidence."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.github_api import RepoRef
from bot.github_client import GitHubAppClient
from bot.messages import UNVERIFIED_LABEL
from solver.hostgit import HostRepo
from tests.support.fake_github.server import FakeGitHub
from workers.publish.pull import DraftPull, push_and_open_pull
from workers.repo_cache import RepoCache

OWNER, NAME, MAINTAINER = "octo", "calc", "maintainer"


@dataclass
class Publishing:
    fake: FakeGitHub
    github: GitHubAppClient
    repo: RepoRef
    cache: RepoCache
    root: Path

    def publish(self, fix: str, run: int, unverified: bool) -> int:
        """A run's change to calc.py, pushed and its PR opened or updated."""
        mirror = self.cache.refresh(self.github.clone_url(self.repo),
                                    self.github.installation_token(self.repo))
        host = HostRepo.create(mirror, "main", self.root / f"run{run}" / "git",
                               self.root / f"run{run}" / "workspace")
        (host.work_tree / "calc.py").write_text(fix)
        draft = DraftPull(title="[FrogNano] add() subtracts", body=f"run {run}",
                          base="main", message="fix add", unverified=unverified)
        return push_and_open_pull(self.github, self.cache, self.repo, host, host.snapshot(),
                                  1, draft, reviewer=MAINTAINER).number


@pytest.fixture
def publishing(tmp_path: Path) -> Iterator[Publishing]:
    with FakeGitHub(tmp_path / "github") as fake:
        fake.add_repo(OWNER, NAME, {"calc.py": "def add(a, b):\n    return a - b\n"})
        fake.add_issue(OWNER, NAME, 1, "add() subtracts")
        fake.set_permission(OWNER, NAME, MAINTAINER, "write")
        github = GitHubAppClient(fake.app_id, fake.private_key_pem, fake.api_url)
        yield Publishing(fake, github, RepoRef(OWNER, NAME, fake.installation_id),
                         RepoCache(tmp_path / "cache"), tmp_path)
    assert not fake.violations, "\n".join(fake.violations)


def test_the_unverified_label_comes_with_no_evidence_and_goes_with_it(
        publishing: Publishing) -> None:
    first = publishing.publish("def add(a, b):\n    return b + a\n", 1, unverified=True)
    assert UNVERIFIED_LABEL in publishing.fake.issue_labels(OWNER, NAME, first)
    assert "needs-human-review" in publishing.fake.issue_labels(OWNER, NAME, first)
    again = publishing.publish("def add(a, b):\n    return a + b\n", 2, unverified=False)
    assert again == first, "the PR is updated, not opened twice"
    labels = publishing.fake.issue_labels(OWNER, NAME, first)
    assert UNVERIFIED_LABEL not in labels and "needs-human-review" in labels
    # A verified run on a PR that never carried the label: GitHub's 404 is no error.
    publishing.publish("def add(a, b):\n    return a + b  # sum\n", 3, unverified=False)
    assert UNVERIFIED_LABEL not in publishing.fake.issue_labels(OWNER, NAME, first)
