"""GitHub's errors arrive typed by cause (as gidgethub does), so callers match on a class,
not on message text; each is still a `GitHubError`. Served by the local fake GitHub."""

from __future__ import annotations

import base64
import subprocess
import time
from pathlib import Path

import pytest

from bot.github_api import (
    AlreadyExists,
    Forbidden,
    GitHubError,
    NotAFile,
    NotFound,
    RateLimited,
    RepoRef,
    ServerError,
    ValidationFailed,
)
from bot.github_client import REST_API_VERSION, GitHubAppClient
from tests.conftest import git
from tests.support.fake_github import FakeGitHub
from tests.support.fake_github.openapi_spec import DESCRIPTION_API_VERSION
from tests.support.fake_github.server import INSTALLATION_ID

OWNER, NAME = "acme", "calc"
REPO = RepoRef(OWNER, NAME, INSTALLATION_ID)
NOT_ACCESSIBLE = "Resource not accessible by integration"


@pytest.fixture
def fake(fake_github: FakeGitHub) -> FakeGitHub:
    fake_github.add_repo(OWNER, NAME, {"README.md": "# calc\n"})
    fake_github.add_issue(OWNER, NAME, 7, "add() subtracts", "Fix add.", author="alice")
    return fake_github


def make_client(fake: FakeGitHub, max_wait: float = 0.5) -> GitHubAppClient:
    return GitHubAppClient(fake.app_id, fake.private_key_pem, fake.api_url,
                           backoff_seconds=0.01, max_retry_wait_seconds=max_wait)


def posts(fake: FakeGitHub, suffix: str) -> int:
    return sum(r.method == "POST" and r.path.endswith(suffix) for r in fake.api_requests())


def test_a_missing_thing_is_not_found(fake: FakeGitHub) -> None:
    with pytest.raises(NotFound) as caught:
        make_client(fake).edit_comment(REPO, 424242, "x")
    assert caught.value.status == 404 and isinstance(caught.value, GitHubError)


def test_a_duplicate_label_is_already_exists(fake: FakeGitHub) -> None:
    fake.add_label(OWNER, NAME, "bug", "d93f0b")
    client = make_client(fake)
    with pytest.raises(AlreadyExists) as caught:
        client._must(REPO, "POST label", lambda gh: gh.rest(REST_API_VERSION).issues.create_label(
            OWNER, NAME, name="bug", color="d93f0b"))
    assert isinstance(caught.value, ValidationFailed)
    assert "already_exists" in caught.value.codes


def test_not_accessible_by_integration_is_forbidden_and_not_retried(fake: FakeGitHub) -> None:
    fake.fail_next("POST", r"/issues/7/comments$", 403, message=NOT_ACCESSIBLE, times=4)
    with pytest.raises(Forbidden) as caught:
        make_client(fake).comment(REPO, 7, "hello")
    assert caught.value.github_message == NOT_ACCESSIBLE
    assert NOT_ACCESSIBLE in str(caught.value)
    assert posts(fake, "/issues/7/comments") == 1  # a permission does not appear by retrying


def test_an_exhausted_primary_limit_is_reported_with_its_reset(fake: FakeGitHub) -> None:
    reset = int(time.time()) + 3600
    fake.fail_next("POST", r"/issues/7/comments$", 403,
                   {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)},
                   message="API rate limit exceeded for installation ID 1.")
    started = time.monotonic()
    with pytest.raises(RateLimited) as caught:
        make_client(fake).comment(REPO, 7, "hello")
    assert time.monotonic() - started < 5  # no capped retries against an hour-long limit
    assert caught.value.retry_after_s is not None and caught.value.retry_after_s > 3000
    assert time.strftime("%H:%M", time.gmtime(reset)) in str(caught.value)
    assert posts(fake, "/issues/7/comments") == 1


def test_a_primary_limit_that_resets_soon_is_waited_out(fake: FakeGitHub) -> None:
    reset = int(time.time()) + 2
    fake.fail_next("POST", r"/issues/7/comments$", 403,
                   {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)},
                   message="API rate limit exceeded for installation ID 1.")
    make_client(fake, max_wait=5).comment(REPO, 7, "hello")
    assert time.time() >= reset - 1  # it waited for the reset rather than hammering
    assert [c.body for c in fake.comments(OWNER, NAME, 7)] == ["hello"]


def test_server_errors_that_persist_are_server_error(fake: FakeGitHub) -> None:
    fake.fail_next("PATCH", r"/issues/comments/\d+$", 502, times=8)
    client = make_client(fake)
    comment_id = client.comment(REPO, 7, "hello")
    with pytest.raises(ServerError) as caught:
        client.edit_comment(REPO, comment_id, "edited")
    assert caught.value.status == 502


def test_the_fake_checks_types_as_github_does() -> None:
    # Its own fake without the OpenAPI check, which would flag these requests first:
    # this is about the fake's own behaviour when a client sends the wrong shapes.
    loose = FakeGitHub(validate_openapi=False).start()
    try:
        loose.add_repo(OWNER, NAME, {"README.md": "# calc\n"})
        loose.add_issue(OWNER, NAME, 7, "t", "b", author="alice")
        headers = {"Authorization": f"token {loose.mint_token(loose.installation_id).token}"}
        base = f"{loose.api_url}/repos/{OWNER}/{NAME}"
        import httpx  # only this test speaks raw HTTP
        drafted = httpx.post(f"{base}/pulls", headers=headers, json={
            "title": "t", "head": "main", "base": "main", "draft": "false"})
        assert drafted.status_code == 422 and "is not a boolean" in drafted.text

        for shape in ({"labels": "bug"}, {"labels": [1]}, {"labels": [None]}):
            answer = httpx.post(f"{base}/issues/7/labels", headers=headers, json=shape)
            assert answer.status_code == 422, shape
        assert loose.issue_labels(OWNER, NAME, 7) == []
        named = httpx.post(f"{base}/issues/7/labels", headers=headers,
                           json={"labels": [{"name": "bug"}]})
        assert named.status_code == 200 and loose.issue_labels(OWNER, NAME, 7) == ["bug"]
    finally:
        loose.stop()


def test_the_client_speaks_the_api_version_of_the_fakes_description(fake: FakeGitHub) -> None:
    client = make_client(fake)
    client.comment(REPO, 7, "hello")
    client.issue(REPO, 7)
    spoken = {r.api_version for r in fake.api_requests() if r.kind == "api"}
    assert spoken == {DESCRIPTION_API_VERSION} == {REST_API_VERSION}


def test_the_fake_refuses_another_api_version_as_github_does(fake: FakeGitHub) -> None:
    # githubkit's own default namespace speaks its latest version, not the description's.
    client = make_client(fake)
    with pytest.raises(GitHubError) as caught:
        client._must(REPO, "GET issue", lambda gh: gh.rest.issues.get(OWNER, NAME, 7))
    assert caught.value.status == 400
    assert "Unsupported 'X-GitHub-Api-Version' header" in caught.value.github_message
    assert [v for v in fake.violations if "X-GitHub-Api-Version" in v], fake.violations
    fake.violations.clear()  # seen: the fixture fails on any left


def test_a_directory_where_a_file_is_read_is_not_a_file(fake_github: FakeGitHub) -> None:
    fake_github.add_repo(OWNER, NAME, {".github/frognano.yml/test": "pytest\n",
                                       "README.md": "# calc\n"})
    client = make_client(fake_github)
    with pytest.raises(NotAFile) as caught:
        client.read_file(REPO, ".github/frognano.yml", "main")
    assert caught.value.kind == "dir" and caught.value.path == ".github/frognano.yml"
    assert "`.github/frognano.yml` on `main` is a directory, not a file" in str(caught.value)
    assert client.read_file(REPO, ".github/absent.yml", "main") is None
    # The fake listed the directory as GitHub does (its OpenAPI check passed on it).
    listed = [r for r in fake_github.api_requests() if r.path.endswith("frognano.yml")]
    assert listed[0].status == 200


def test_a_missing_app_permission_is_forbidden_and_names_it(fake: FakeGitHub) -> None:
    fake.deny_permission("POST", r"/issues/7/comments$", "issues=write; pull_requests=write")
    with pytest.raises(Forbidden) as caught:
        make_client(fake).comment(REPO, 7, "hello")
    assert caught.value.accepted_permissions == "issues=write; pull_requests=write"
    assert caught.value.missing_permission == "issues: write"
    assert "(the App needs the permission issues=write; pull_requests=write)" in str(
        caught.value)  # what the log and the run record keep
    assert posts(fake, "/issues/7/comments") == 1


@pytest.mark.parametrize("status", [403, 429])
def test_a_spent_rate_limit_served_by_the_fake_is_rate_limited_with_its_reset(
        fake: FakeGitHub, status: int) -> None:
    reset = fake.rate_limit_next("GET", r"/issues/7$", reset_in_s=3600, status=status)
    with pytest.raises(RateLimited) as caught:
        make_client(fake).issue(REPO, 7)
    assert caught.value.status == status and caught.value.reset_at is not None
    assert abs(caught.value.reset_at.timestamp() - reset) < 5


def test_a_symlink_or_a_submodule_is_not_a_file(fake_github: FakeGitHub,
                                               tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "README.md").write_text("# calc\n")
    (work / "config.yml").symlink_to("README.md")
    git(work, "add", "-A")
    # A gitlink (what a submodule is in the tree), without a .gitmodules to follow.
    git(work, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},vendored")
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "i")
    fake_github.add_repo(OWNER, NAME, work)
    client = make_client(fake_github)
    for path, kind in (("config.yml", "symlink"), ("vendored", "submodule")):
        with pytest.raises(NotAFile) as caught:
            client.read_file(REPO, path, "main")
        assert caught.value.kind == kind, path
    assert client.read_file(REPO, "README.md", "main") == "# calc\n"


def test_the_fakes_rate_limit_window_is_spent_and_resets_as_githubs(fake: FakeGitHub) -> None:
    client = make_client(fake, max_wait=5)
    reset = fake.spend_rate_limit(remaining=1, reset_in_s=3600)
    client.issue(REPO, 7)  # the last request of the window
    with pytest.raises(RateLimited) as caught:
        client.issue(REPO, 7)
    assert caught.value.reset_at is not None
    assert abs(caught.value.reset_at.timestamp() - reset) < 5
    # A window that resets in seconds is waited out, and the next one is full again.
    fake.spend_rate_limit(remaining=0, reset_in_s=2)
    assert client.issue(REPO, 7).title == "add() subtracts"
    assert fake.rate_limit.remaining == fake.rate_limit.limit - 1
    answered = [r.status for r in fake.api_requests() if r.path.endswith("/issues/7")]
    assert answered[:2] == [200, 403] and answered[-1] == 200 and 403 in answered[2:-1]


def test_every_rest_answer_says_where_the_rate_limit_stands(fake: FakeGitHub) -> None:
    import httpx  # the headers githubkit reads, seen raw

    token = fake.mint_token(fake.installation_id).token
    answer = httpx.get(f"{fake.api_url}/repos/{OWNER}/{NAME}/issues/7",
                       headers={"Authorization": f"token {token}"})
    assert answer.status_code == 200
    assert int(answer.headers["X-RateLimit-Remaining"]) == fake.rate_limit.remaining
    assert answer.headers["X-RateLimit-Limit"] == str(fake.rate_limit.limit) == "12500"
    assert int(answer.headers["X-RateLimit-Reset"]) > time.time()


def test_the_installations_permissions_decide_as_on_github(fake: FakeGitHub) -> None:
    client = make_client(fake)
    fake.installation_permissions.update(issues="read", pull_requests="read")
    assert client.issue(REPO, 7).title == "add() subtracts"  # read is enough to read
    with pytest.raises(Forbidden) as caught:
        client.comment(REPO, 7, "hello")
    assert caught.value.accepted_permissions == "issues=write; pull_requests=write"
    assert caught.value.github_message == NOT_ACCESSIBLE
    fake.installation_permissions["pull_requests"] = "write"  # either set will do
    client.comment(REPO, 7, "hello")
    assert [c.body for c in fake.comments(OWNER, NAME, 7)] == ["hello"]


def test_a_push_needs_contents_write(fake: FakeGitHub, tmp_path: Path) -> None:
    token = fake.mint_token(fake.installation_id).token
    auth = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    url = fake.clone_url(OWNER, NAME)
    header = ["-c", f"http.extraHeader=Authorization: Basic {auth}"]
    git(tmp_path, *header, "clone", "-q", url, "work")
    work = tmp_path / "work"
    git(work, "commit", "-q", "--allow-empty", "-m", "empty")
    fake.installation_permissions["contents"] = "read"
    refused = subprocess.run(["git", *header, "push", "-q", "origin", "HEAD:main"], cwd=work,
                             capture_output=True, text=True, check=False)
    assert refused.returncode != 0 and "403" in refused.stderr
    fake.installation_permissions["contents"] = "write"
    git(work, *header, "push", "-q", "origin", "HEAD:main")
    assert fake.branch_sha(OWNER, NAME, "main") == git(work, "rev-parse", "HEAD").strip()


def test_a_push_touching_workflows_needs_the_workflows_permission(fake: FakeGitHub,
                                                                  tmp_path: Path) -> None:
    # What the manifest's missing `workflows` permission buys: GitHub itself refuses.
    token = fake.mint_token(fake.installation_id).token
    auth = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    header = ["-c", f"http.extraHeader=Authorization: Basic {auth}"]
    git(tmp_path, *header, "clone", "-q", fake.clone_url(OWNER, NAME), "work")
    work = tmp_path / "work"
    (work / ".github" / "workflows").mkdir(parents=True)
    (work / ".github" / "workflows" / "ci.yml").write_text("on: push\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "a workflow")
    assert "workflows" not in fake.installation_permissions
    refused = subprocess.run(["git", *header, "push", "-q", "origin", "HEAD:feature"],
                             cwd=work, capture_output=True, text=True, check=False)
    assert refused.returncode != 0
    assert ("refusing to allow a GitHub App to create or update workflow "
            "`.github/workflows/ci.yml` without `workflows` permission") in refused.stderr
    assert fake.branch_sha(OWNER, NAME, "feature") is None
    fake.installation_permissions["workflows"] = "write"
    git(work, *header, "push", "-q", "origin", "HEAD:feature")
    assert fake.branch_sha(OWNER, NAME, "feature") == git(work, "rev-parse", "HEAD").strip()
