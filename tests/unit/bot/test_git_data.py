"""The Git Data API client (bot/git_data.py, GitHubAppClient's blob/tree/commit/ref verbs)
against the fake GitHub over real HTTP, every exchange checked against GitHub's OpenAPI
description; and the fake's `require_signed_commits` rule against a plain git push."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bot.git_data import TreeChange, co_author_trailer, tree_payload, with_co_author
from bot.github_api import AlreadyExists, NotFastForward, NotFound, RepoRef, ServerError
from bot.github_client import GitHubAppClient
from tests.conftest import git
from tests.support.fake_github import git_data as fake_git_data
from tests.support.fake_github.server import FakeGitHub

OWNER, NAME = "octo", "calc"


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeGitHub]:
    with FakeGitHub(tmp_path / "github") as started:
        started.add_repo(OWNER, NAME, {"calc.py": "def add(a, b):\n    return a - b\n",
                                       "docs/old.md": "old\n"})
        yield started
    assert not started.violations, "\n".join(started.violations)


@pytest.fixture
def client(fake: FakeGitHub) -> GitHubAppClient:
    return GitHubAppClient(fake.app_id, fake.private_key_pem, fake.api_url,
                           backoff_seconds=0.01)


@pytest.fixture
def repo(fake: FakeGitHub) -> RepoRef:
    return RepoRef(OWNER, NAME, fake.installation_id)


def bare(fake: FakeGitHub, *args: str) -> str:
    return git(fake.repo(OWNER, NAME).bare_path, *args).strip()


def hash_blob(data: bytes) -> str:
    return subprocess.run(["git", "hash-object", "--stdin"], input=data, capture_output=True,
                          check=True).stdout.decode().strip()


def made_commit(client: GitHubAppClient, repo: RepoRef, fake: FakeGitHub) -> str:
    """calc.py fixed, docs/old.md deleted, a binary file added: one commit on main."""
    main = bare(fake, "rev-parse", "main")
    fixed = client.create_blob(repo, b"def add(a, b):\n    return a + b\n")
    binary = client.create_blob(repo, bytes(range(256)))
    tree = client.create_tree(repo, bare(fake, "rev-parse", "main^{tree}"), [
        TreeChange("calc.py", "100644", fixed), TreeChange("docs/old.md", "100644", None),
        TreeChange("bin/data", "100755", binary)])
    made = client.create_commit(repo, message="fix add\n\nFixes #1.", tree=tree,
                                parents=[main])
    assert made.tree == tree
    assert made.verified and made.reason == "valid", "GitHub signs what names no author"
    return made.sha


def test_a_commit_made_through_the_api_is_the_tree_asked_for_and_verified(
        client: GitHubAppClient, repo: RepoRef, fake: FakeGitHub) -> None:
    assert client.create_blob(repo, bytes(range(256))) == hash_blob(bytes(range(256)))
    sha = made_commit(client, repo, fake)
    listing = bare(fake, "ls-tree", "-r", "--name-only", sha).split()
    assert listing == ["bin/data", "calc.py"], "the deletion took, the rest came from base"
    assert bare(fake, "show", f"{sha}:calc.py").endswith("return a + b")
    assert bare(fake, "ls-tree", sha, "bin/data").startswith("100755 blob")
    author = bare(fake, "show", "-s", "--format=%an <%ae>", sha)
    bot_id = fake.user_id(fake.bot_login)
    assert author == f"{fake.bot_login} <{bot_id}+{fake.bot_login}@users.noreply.github.com>"
    # What a reader of the commit sees: GET git/commits/{sha} says verified.
    token = client.installation_token(repo)
    answer = httpx.get(f"{fake.api_url}/repos/{OWNER}/{NAME}/git/commits/{sha}",
                       headers={"Authorization": f"token {token}",
                                "X-GitHub-Api-Version": "2022-11-28"})
    assert answer.status_code == 200
    assert answer.json()["verification"] == {**answer.json()["verification"],
                                             "verified": True, "reason": "valid"}


def test_branch_refs_create_move_fast_forward_only_and_say_why_not(
        client: GitHubAppClient, repo: RepoRef, fake: FakeGitHub) -> None:
    main = bare(fake, "rev-parse", "main")
    assert client.branch_head(repo, "frognano/issue-1") is None
    with pytest.raises(NotFound):
        client.move_branch(repo, "frognano/issue-1", main, force=True)
    client.create_branch(repo, "frognano/issue-1", main)
    assert client.branch_head(repo, "frognano/issue-1") == main
    with pytest.raises(AlreadyExists):
        client.create_branch(repo, "frognano/issue-1", main)
    sha = made_commit(client, repo, fake)
    client.move_branch(repo, "frognano/issue-1", sha, force=False)  # a fast-forward
    assert fake.branch_sha(OWNER, NAME, "frognano/issue-1") == sha
    with pytest.raises(NotFastForward):  # back to its parent: not a fast-forward
        client.move_branch(repo, "frognano/issue-1", main, force=False)
    assert fake.branch_sha(OWNER, NAME, "frognano/issue-1") == sha
    client.move_branch(repo, "frognano/issue-1", main, force=True)
    assert fake.branch_sha(OWNER, NAME, "frognano/issue-1") == main


def test_a_ref_write_is_tried_once_so_the_caller_decides(
        client: GitHubAppClient, repo: RepoRef, fake: FakeGitHub) -> None:
    """A 5xx on a ref write is not retried inside the client (the publishing loop asks
    about a cancel first); a blob is, being idempotent."""
    main = bare(fake, "rev-parse", "main")
    fake.fail_next("POST", r"/git/refs$", 502)
    with pytest.raises(ServerError):
        client.create_branch(repo, "frognano/issue-2", main)
    writes = [r.status for r in fake.requests if r.path.endswith("/git/refs")]
    assert writes == [502]
    fake.fail_next("POST", r"/git/blobs$", 502)
    assert client.create_blob(repo, b"x") == hash_blob(b"x")


def test_the_signed_commits_rule_refuses_an_unsigned_push_and_takes_a_signed_ref(
        client: GitHubAppClient, repo: RepoRef, fake: FakeGitHub, tmp_path: Path) -> None:
    fake_git_data.require_signed_commits(fake.repo(OWNER, NAME))
    work = tmp_path / "work"  # a person's clone, over git smart HTTP with a token
    url = fake.clone_url(OWNER, NAME).replace(
        "http://", f"http://x-access-token:{client.installation_token(repo)}@")
    git(tmp_path, "clone", "-q", url, str(work))
    (work / "calc.py").write_text("def add(a, b):\n    return b + a\n")
    git(work, "-c", "user.name=Someone", "-c", "user.email=s@example.com", "commit", "-qam",
        "unsigned")
    push = subprocess.run(["git", "push", "origin", "HEAD:refs/heads/unsigned"], cwd=work,
                          capture_output=True, text=True)
    assert push.returncode != 0
    assert "GH013: Repository rule violations found" in push.stderr
    assert "Commits must have verified signatures." in push.stderr
    assert fake.branch_sha(OWNER, NAME, "unsigned") is None
    sha = made_commit(client, repo, fake)  # through the API: signed by GitHub
    client.create_branch(repo, "signed", sha)
    assert fake.branch_sha(OWNER, NAME, "signed") == sha
    # A commit that names its author is not GitHub's to sign: the rule refuses its ref.
    headers = {"Authorization": f"token {client.installation_token(repo)}",
               "X-GitHub-Api-Version": "2022-11-28"}
    api = f"{fake.api_url}/repos/{OWNER}/{NAME}/git"
    authored = httpx.post(f"{api}/commits", headers=headers, json={
        "message": "mine", "tree": bare(fake, "rev-parse", f"{sha}^{{tree}}"),
        "parents": [sha], "author": {"name": "Someone", "email": "s@example.com"}}).json()
    assert authored["verification"]["verified"] is False
    refused = httpx.post(f"{api}/refs", headers=headers,
                         json={"ref": "refs/heads/authored", "sha": authored["sha"]})
    assert refused.status_code == 422
    assert "Commits must have verified signatures" in refused.json()["message"]


def test_the_co_author_trailer_names_a_person_only() -> None:
    assert co_author_trailer("maintainer", 42) == \
        "Co-authored-by: maintainer <42+maintainer@users.noreply.github.com>"
    for login in ("frognano[bot]", "a b", "x\nCo-authored-by: evil <e@x>", "-lead", "",
                  "a" * 40, "double--hyphen"):
        assert co_author_trailer(login, 42) is None, login
    assert co_author_trailer("maintainer", None) is None
    message = with_co_author("fix add\n\nFixes #1.\n", "maintainer", 42)
    assert message == ("fix add\n\nFixes #1.\n\n"
                       "Co-authored-by: maintainer <42+maintainer@users.noreply.github.com>\n")
    assert with_co_author("fix", "frognano[bot]", 1) == "fix"


def test_a_tree_payload_deletes_with_a_null_sha_and_refuses_a_tree_entry() -> None:
    payload = tree_payload("t" * 40, [TreeChange("a", "120000", "s" * 40),
                                      TreeChange("b", "100644", None)])
    assert payload == {"base_tree": "t" * 40, "tree": [
        {"path": "a", "mode": "120000", "type": "blob", "sha": "s" * 40},
        {"path": "b", "mode": "100644", "type": "blob", "sha": None}]}
    with pytest.raises(ValueError):
        tree_payload("t" * 40, [TreeChange("d", "040000", "s" * 40)])
