"""Issue 23 §3, end to end (real receiver, redis-server, Celery workers, bubblewrap, git,
the fake GitHub checked against GitHub's OpenAPI, the scripted model): on a repository
whose rules require signed commits, the bot's draft PR and its review follow-up are
commits GitHub made through its Git Data API and signed (Verified), crediting the person
who asked with `Co-authored-by:`; the same rule refuses a plain git push of an unsigned
commit, so a bot that pushed with git could not publish there at all."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError

from tests.conftest import git
from tests.e2e.test_pipeline import SCRIPT, review_payload
from tests.e2e.test_pipeline import finished_run as newest_run
from tests.reliability.stack import (
    MAINTAINER,
    OWNER,
    Stack,
    StackOptions,
    running_stack,
    user_json,
    wait_for,
)
from tests.support.fake_github import git_data
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")

REPO, BRANCH = "calc-signed", "frognano/issue-1"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack"), StackOptions(SCRIPT)) as stack:
        stack.add_calc_repo(REPO)
        git_data.require_signed_commits(stack.fake.repo(OWNER, REPO))
        yield stack


def finished_run(stack: Stack, repo: str) -> Any:
    try:
        return newest_run(stack, repo)
    except OperationalError:  # before the workers made the run store's tables
        return None


def github_commit(stack: Stack, sha: str) -> dict[str, Any]:
    """GET git/commits/{sha}, as anyone reading the commit on GitHub would; GET
    commits/{sha} (the commit page's API) says the same about its signature."""
    token = stack.fake.mint_token(stack.fake.installation_id).token
    headers = {"Authorization": f"token {token}", "X-GitHub-Api-Version": "2022-11-28"}
    api = f"{stack.fake.api_url}/repos/{OWNER}/{REPO}"
    answer = httpx.get(f"{api}/git/commits/{sha}", headers=headers)
    assert answer.status_code == 200, answer.text
    page = httpx.get(f"{api}/commits/{sha}", headers=headers)
    assert page.status_code == 200, page.text
    assert page.json()["commit"]["verification"] == answer.json()["verification"]
    return dict(answer.json())


def co_author(login: str) -> str:
    user_id = user_json(login)["id"]
    return f"Co-authored-by: {login} <{user_id}+{login}@users.noreply.github.com>"


def git_pushes(stack: Stack, since: int = 0) -> list[Any]:
    """git pushes to the repository among the fake's requests from index `since` on."""
    return [r for r in stack.fake.requests[since:]
            if r.path == f"/{OWNER}/{REPO}.git/git-receive-pack"]


def bot_pr(stack: Stack) -> Any:
    """The first run (label → run → draft PR), once for the module's tests."""
    if not stack.fake.pulls(OWNER, REPO):
        assert stack.label(REPO, 1).status_code == 202
    run = wait_for(lambda: (r := finished_run(stack, REPO)) and r, timeout=180,
                   message="the first run to finish")
    assert run.outcome == "pr_opened", stack.worker_logs()
    return run


def test_the_draft_pr_is_a_verified_commit_crediting_who_asked(stack: Stack,
                                                               tmp_path: Path) -> None:
    bot_pr(stack)
    pull = stack.fake.pulls(OWNER, REPO)[0]
    assert pull.draft and pull.head == BRANCH and pull.body.startswith("Fixes #1: ")
    head = stack.fake.branch_sha(OWNER, REPO, BRANCH)
    assert head is not None
    commit = github_commit(stack, head)
    assert commit["verification"]["verified"] is True
    assert commit["verification"]["reason"] == "valid"
    assert commit["author"]["name"] == stack.fake.bot_login
    assert commit["message"].splitlines()[-1] == co_author(MAINTAINER)
    assert "Fixes #1." in commit["message"]
    assert git_pushes(stack) == [], "git smart HTTP only fetched"
    # The cost (docs/VERIFIED_COMMITS.md): one blob for the one changed file, a tree, a
    # commit, one ref write; beside the run's other REST requests.
    base = f"/repos/{OWNER}/{REPO}"
    writes = [(r.method, r.path.removeprefix(base)) for r in stack.fake.requests
              if r.path.startswith(f"{base}/git/") and r.method != "GET"]
    assert writes == [("POST", "/git/blobs"), ("POST", "/git/trees"),
                      ("POST", "/git/commits"), ("POST", "/git/refs")]
    rest = [r for r in stack.fake.requests if r.kind == "api" and r.path.startswith(base)]
    print(f"REST requests of the run: {len(rest)}, of which the commit's: {len(writes)}")
    # The commit's tree is what was tested: the fix, and nothing else changed.
    clone = tmp_path / "check"
    git(tmp_path, "clone", "-q", "--branch", BRANCH,
        str(stack.fake.repo(OWNER, REPO).bare_path), str(clone))
    assert git(clone, "diff", "--name-only", "HEAD^", "HEAD").split() == ["calc.py"]
    assert "return a + b" in (clone / "calc.py").read_text()


def test_the_rule_refuses_a_plain_push_of_an_unsigned_commit(stack: Stack,
                                                            tmp_path: Path) -> None:
    """The point of the API: the same commit pushed with git, even by the App's own
    token, is refused by the repository's rule."""
    token = stack.fake.mint_token(stack.fake.installation_id).token
    url = stack.fake.clone_url(OWNER, REPO).replace("http://",
                                                    f"http://x-access-token:{token}@")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", url, str(work))
    (work / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(work, "commit", "-qam", "fix add the git way")
    push = subprocess.run(["git", "push", "origin", "HEAD:refs/heads/frognano/issue-9"],
                          cwd=work, capture_output=True, text=True)
    assert push.returncode != 0
    assert "GH013: Repository rule violations found" in push.stderr
    assert "Commits must have verified signatures." in push.stderr
    assert stack.fake.branch_sha(OWNER, REPO, "frognano/issue-9") is None


def test_a_review_follow_up_is_a_verified_commit_on_the_pr_head(stack: Stack) -> None:
    bot_pr(stack)
    first = stack.fake.branch_sha(OWNER, REPO, BRANCH)
    pull = stack.fake.pulls(OWNER, REPO)[0]
    reviewer = "reviewer-2"
    stack.fake.set_permission(OWNER, REPO, reviewer, "write")
    since = len(stack.fake.requests)  # the rule's test pushed with git, as a person
    assert stack.deliver("pull_request_review", review_payload(
        stack, REPO, pull.number, reviewer, "Say that add returns the sum.")).status_code \
        == 202
    run = wait_for(lambda: (r := finished_run(stack, REPO)) and r.outcome != "pr_opened"
                   and r, timeout=180, message="the review run to finish")
    assert run.outcome == "pushed", stack.worker_logs()
    head = stack.fake.branch_sha(OWNER, REPO, BRANCH)
    assert head is not None and head != first
    commit = github_commit(stack, head)
    assert commit["verification"]["verified"] is True
    assert [p["sha"] for p in commit["parents"]] == [first], "on top, no force"
    assert commit["message"].splitlines()[-1] == co_author(reviewer)
    assert git_pushes(stack, since) == []
    reply = [c.body for c in stack.fake.comments(OWNER, REPO, pull.number)
             if "FrogNano** pushed " in c.body]
    assert reply and head[:12] in reply[0], "the reply names the commit GitHub made"
