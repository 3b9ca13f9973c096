"""`GitHubAppClient` against the local fake GitHub, every verb plus git over smart HTTP.

The `fake_github` fixture fails a test whose requests or responses GitHub's
OpenAPI description rejects.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from bot.github_api import GitHubError, RepoRef
from bot.github_client import GitHubAppClient, clone_host_url
from bot.markdown import CUT_NOTICE, GITHUB_BODY_LIMIT
from tests.support.fake_github import FakeGitHub
from tests.support.fake_github.server import INSTALLATION_ID

OWNER, NAME = "acme", "calc"
REPO = RepoRef(OWNER, NAME, INSTALLATION_ID)
FILES = {"README.md": "# calc\n", ".github/frognano.yml": "test_command: pytest -q\n",
         "calc.py": "def add(a, b):\n    return a - b\n"}


@pytest.fixture
def fake(fake_github: FakeGitHub) -> FakeGitHub:
    fake_github.add_repo(OWNER, NAME, FILES)
    fake_github.add_issue(OWNER, NAME, 7, "add() subtracts", "Fix add.", author="alice")
    return fake_github


@pytest.fixture
def client(fake: FakeGitHub) -> GitHubAppClient:
    return GitHubAppClient(fake.app_id, fake.private_key_pem, fake.api_url,
                           backoff_seconds=0.01, max_retry_wait_seconds=0.5)


def git(cwd: Path, *args: str, env: dict[str, str] | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.com", *args],
                          cwd=cwd, env=env, check=check, capture_output=True, text=True,
                          timeout=60)


def askpass_env(tmp_path: Path, token: str) -> dict[str, str]:
    """Credentials through GIT_ASKPASS: the token is in the helper's env, not in any URL."""
    helper = tmp_path / "askpass.sh"
    helper.write_text('#!/bin/sh\ncase "$1" in Username*) echo x-access-token;; '
                      '*) echo "$FROGNANO_GIT_TOKEN";; esac\n')
    helper.chmod(0o700)
    return {**os.environ, "GIT_ASKPASS": str(helper), "FROGNANO_GIT_TOKEN": token,
            "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"}


# -- identity, tokens, repository -------------------------------------------------------


def test_bot_login_comes_from_the_app_slug(client: GitHubAppClient, fake: FakeGitHub) -> None:
    assert client.bot_login() == "frognano[bot]"
    assert fake.requests[-1].credential == f"jwt:{fake.app_id}"


def test_installation_token_is_fresh_every_call(client: GitHubAppClient,
                                                fake: FakeGitHub) -> None:
    first, second = client.installation_token(REPO), client.installation_token(REPO)
    assert first != second
    assert [t.token for t in fake.issued_tokens] == [first, second]


def test_api_calls_carry_an_installation_token(client: GitHubAppClient,
                                              fake: FakeGitHub) -> None:
    assert client.default_branch(REPO) == "main"
    issued = {t.token for t in fake.issued_tokens}
    assert fake.requests[-1].path == f"/repos/{OWNER}/{NAME}"
    assert fake.requests[-1].credential in issued


def test_an_expired_installation_token_is_replaced(client: GitHubAppClient,
                                                   fake: FakeGitHub) -> None:
    assert client.issue(REPO, 7).number == 7
    fake.expire_tokens()
    assert client.issue(REPO, 7).number == 7
    assert len(fake.issued_tokens) == 2
    assert [r.status for r in fake.api_requests() if r.path.endswith("/issues/7")] == [
        200, 401, 200]


def test_clone_url_follows_the_api_host(fake: FakeGitHub) -> None:
    def url(api: str) -> str:
        return GitHubAppClient(1, fake.private_key_pem, api).clone_url(REPO)

    assert url("https://api.github.com") == "https://github.com/acme/calc.git"
    assert url("https://ghe.example.com/api/v3") == "https://ghe.example.com/acme/calc.git"
    assert url(fake.api_url) == fake.clone_url(OWNER, NAME)
    assert clone_host_url("http://127.0.0.1:8080/") == "http://127.0.0.1:8080"


def test_read_file_at_a_ref_and_missing_file(client: GitHubAppClient) -> None:
    assert client.read_file(REPO, ".github/frognano.yml", "main") == FILES[".github/frognano.yml"]
    assert client.read_file(REPO, "calc.py", "main") == FILES["calc.py"]
    assert client.read_file(REPO, "nope.txt", "main") is None
    assert client.read_file(REPO, "README.md", "no-such-branch") is None


@pytest.mark.parametrize(("role", "expected"), [
    ("admin", "admin"), ("maintain", "maintain"), ("write", "write"), ("triage", "triage"),
    ("read", "read")])
def test_permission_keeps_maintain_and_triage(client: GitHubAppClient, fake: FakeGitHub,
                                              role: str, expected: str) -> None:
    fake.set_permission(OWNER, NAME, "bob", role)
    assert client.permission(REPO, "bob") == expected


def test_permission_of_unknown_user_is_none(client: GitHubAppClient) -> None:
    assert client.permission(REPO, "ghost-user-404") == "none"


# -- issues, comments, reactions, labels ------------------------------------------------


def test_issue_and_comments(client: GitHubAppClient, fake: FakeGitHub) -> None:
    info = client.issue(REPO, 7)
    assert (info.number, info.title, info.body, info.state, info.author,
            info.is_pull_request) == (7, "add() subtracts", "Fix add.", "open", "alice", False)
    fake.add_comment(OWNER, NAME, 7, "/frognano retry please", "alice")
    comment_id = client.comment(REPO, 7, "queued (position 1)")
    client.edit_comment(REPO, comment_id, "running (step 1 of 20)")
    stored = fake.comments(OWNER, NAME, 7)
    assert [(c.user, c.body) for c in stored] == [
        ("alice", "/frognano retry please"), ("frognano[bot]", "running (step 1 of 20)")]
    listed = client.comments(REPO, 7)
    assert [(c.author, c.body) for c in listed] == [(c.user, c.body) for c in stored]
    assert listed[1].id == comment_id


def test_comments_follow_pagination(client: GitHubAppClient, fake: FakeGitHub) -> None:
    for i in range(130):
        fake.add_comment(OWNER, NAME, 7, f"c{i}", "alice")
    assert [c.body for c in client.comments(REPO, 7)] == [f"c{i}" for i in range(130)]
    assert [r.query.get("page") for r in fake.requests if r.path.endswith("/comments")] == [
        None, "2"]


def test_missing_issue_is_a_github_error(client: GitHubAppClient) -> None:
    with pytest.raises(GitHubError) as caught:
        client.issue(REPO, 999)
    assert caught.value.status == 404
    assert "issue acme/calc#999" in str(caught.value)


def test_reactions_on_issue_and_comment(client: GitHubAppClient, fake: FakeGitHub) -> None:
    theirs = fake.add_comment(OWNER, NAME, 7, "/frognano retry", "alice")
    client.react(REPO, "eyes", issue_number=7)
    client.react(REPO, "eyes", comment_id=theirs.id)
    assert [(r.subject, r.subject_id, r.content) for r in fake.reactions] == [
        ("issue", 7, "eyes"), ("comment", theirs.id, "eyes")]
    with pytest.raises(ValueError):
        client.react(REPO, "eyes")


def test_ensure_label_is_idempotent(client: GitHubAppClient, fake: FakeGitHub) -> None:
    client.ensure_label(REPO, "needs-human-review", "#d93f0b", "Opened by FrogNano")
    client.ensure_label(REPO, "needs-human-review", "d93f0b", "Opened by FrogNano")
    labels = fake.labels(OWNER, NAME)
    assert list(labels) == ["needs-human-review"]
    assert labels["needs-human-review"].color == "d93f0b"
    assert [r.method for r in fake.api_requests() if "/labels" in r.path] == ["GET", "POST",
                                                                            "GET"]
    client.add_labels(REPO, 7, ["needs-human-review"])
    assert fake.issue_labels(OWNER, NAME, 7) == ["needs-human-review"]


def test_ensure_label_tolerates_a_concurrent_creation(client: GitHubAppClient,
                                                      fake: FakeGitHub) -> None:
    # Another run creates it between our GET (404) and our POST (422 already_exists).
    fake.add_label(OWNER, NAME, "needs-human-review", "d93f0b")
    fake.fail_next("GET", r"/labels/needs-human-review$", 404, message="Not Found")
    client.ensure_label(REPO, "needs-human-review", "d93f0b", "")
    assert [r.status for r in fake.api_requests() if "/labels" in r.path] == [404, 422]


# -- pull requests ----------------------------------------------------------------------


def push_branch(fake: FakeGitHub, tmp_path: Path, branch: str) -> None:
    token = fake.mint_token(fake.installation_id).token
    env = askpass_env(tmp_path, token)
    work = tmp_path / f"work-{branch.replace('/', '-')}"
    git(tmp_path, "clone", "-q", fake.clone_url(OWNER, NAME), str(work), env=env)
    git(work, "checkout", "-q", "-b", branch)
    (work / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(work, "commit", "-qam", "fix add")
    git(work, "push", "-q", "origin", branch, env=env)


def test_draft_pull_open_find_update_review(client: GitHubAppClient, fake: FakeGitHub,
                                            tmp_path: Path) -> None:
    branch = "frognano/issue-7"
    fake.set_permission(OWNER, NAME, "alice", "write")
    assert client.find_open_pull(REPO, branch) is None
    push_branch(fake, tmp_path, branch)
    opened = client.open_draft_pull(REPO, title="[FrogNano] add() subtracts",
                                    body="Fixes #7", head=branch, base="main")
    assert (opened.head, opened.state, opened.draft) == (branch, "open", True)
    assert opened.number == 8  # issues and PRs share numbers
    assert opened.url.endswith(f"/{OWNER}/{NAME}/pull/8")
    assert client.find_open_pull(REPO, branch) == opened
    assert fake.requests[-1].query == {"head": f"{OWNER}:{branch}", "state": "open"}

    updated = client.update_pull(REPO, opened.number, title="[FrogNano] add() subtracts (2)",
                                 body="Fixes #7\n\nrun 2")
    assert updated.number == opened.number
    [stored] = fake.pulls(OWNER, NAME)
    assert (stored.title, stored.body, stored.draft) == (
        "[FrogNano] add() subtracts (2)", "Fixes #7\n\nrun 2", True)

    client.add_labels(REPO, opened.number, ["needs-human-review"])
    client.request_review(REPO, opened.number, ["alice"])
    assert stored.requested_reviewers == ["alice"]
    # The PR's author cannot be asked: GitHub says 422, the client logs and goes on.
    client.request_review(REPO, opened.number, ["frognano[bot]"])
    with pytest.raises(GitHubError) as caught:
        client.request_review(REPO, opened.number, ["stranger"])
    assert caught.value.status == 422

    with pytest.raises(GitHubError) as duplicate:
        client.open_draft_pull(REPO, title="again", body="", head=branch, base="main")
    assert duplicate.value.status == 422
    assert "already exists" in str(duplicate.value)


def test_bodies_over_githubs_limit_are_cut_not_refused(client: GitHubAppClient,
                                                        fake: FakeGitHub, tmp_path: Path) -> None:
    """GitHub answers 422 to a body over 65,536 characters (the fake too, below): every
    body the client sends is cut to fit, at a whole line, saying so; one that fits is
    sent as it is."""
    long_body = "\n".join(f"- `tests/test_core.py::test_case[{n}]`: failed → passed"
                           for n in range(5000))
    token = client.installation_token(REPO)
    raw = httpx.post(f"{fake.api_url}/repos/{OWNER}/{NAME}/issues/7/comments",
                     json={"body": long_body}, headers={"Authorization": f"token {token}"})
    assert raw.status_code == 422 and "body is too long" in raw.text
    comment_id = client.comment(REPO, 7, long_body)
    client.edit_comment(REPO, comment_id, long_body + "\nedited")
    branch = "frognano/issue-7"
    push_branch(fake, tmp_path, branch)
    opened = client.open_draft_pull(REPO, title="t", body=long_body, head=branch, base="main")
    client.update_pull(REPO, opened.number, title="t", body=long_body + "\nagain")
    [posted] = [c for c in fake.comments(OWNER, NAME, 7) if c.id == comment_id]
    [pull] = fake.pulls(OWNER, NAME)
    for body in (posted.body, pull.body):
        assert len(body) <= GITHUB_BODY_LIMIT and body.endswith("\n\n" + CUT_NOTICE)
        kept = body.split("\n")[:-2]
        assert kept == long_body.split("\n")[:len(kept)] and len(kept) > 900
    assert client.comment(REPO, 7, "short") != comment_id
    assert fake.comments(OWNER, NAME, 7)[-1].body == "short"


# -- retries and errors -----------------------------------------------------------------


def test_retries_server_errors(client: GitHubAppClient, fake: FakeGitHub) -> None:
    fake.fail_next("GET", r"^/repos/acme/calc/issues/7$", 502, times=2)
    assert client.issue(REPO, 7).number == 7
    statuses = [r.status for r in fake.api_requests() if r.path.endswith("/issues/7")]
    assert statuses == [502, 502, 200]


def test_a_comment_whose_answer_was_lost_is_not_posted_twice(client: GitHubAppClient,
                                                              fake: FakeGitHub) -> None:
    """GitHub took the POST but the connection dropped before its answer: the retry
    finds the comment it made (`already_done`) instead of posting a second one; a 5xx
    after GitHub acted is the same."""
    fake.drop_next("POST", r"/issues/7/comments$", after_processing=True)
    first = client.comment(REPO, 7, "hello")
    assert [(c.id, c.body) for c in fake.comments(OWNER, NAME, 7)] == [(first, "hello")]
    posts = [r for r in fake.api_requests() if r.method == "POST"
             and r.path.endswith("/issues/7/comments")]
    assert len(posts) == 1, "found, not posted again"


def test_gives_up_after_max_tries(client: GitHubAppClient, fake: FakeGitHub) -> None:
    fake.fail_next("POST", r"/issues/7/comments$", 503, times=10)
    with pytest.raises(GitHubError) as caught:
        client.comment(REPO, 7, "hello")
    assert caught.value.status == 503
    assert "gave up after 4 tries" in str(caught.value)


def test_secondary_rate_limit_honours_retry_after(client: GitHubAppClient,
                                                  fake: FakeGitHub) -> None:
    fake.fail_next("POST", r"/issues/7/comments$", 403, {"Retry-After": "1"},
                   message="You have exceeded a secondary rate limit.")
    fake.fail_next("POST", r"/issues/7/reactions$", 429, {"Retry-After": "3600"})
    started = time.monotonic()
    client.comment(REPO, 7, "hello")
    client.react(REPO, "eyes", issue_number=7)
    # Retry-After 1 s is capped at 0.5 s by this client; 3600 s too.
    assert 0.9 <= time.monotonic() - started < 5
    assert [c.body for c in fake.comments(OWNER, NAME, 7)] == ["hello"]


def test_connection_errors_are_retried_then_reported(fake: FakeGitHub) -> None:
    dead = GitHubAppClient(fake.app_id, fake.private_key_pem, "http://127.0.0.1:9",
                           backoff_seconds=0.01, max_tries=2)
    with pytest.raises(GitHubError) as caught:
        dead.bot_login()
    assert "connection error" in str(caught.value)


def test_error_messages_never_carry_a_token(client: GitHubAppClient, fake: FakeGitHub) -> None:
    with pytest.raises(GitHubError) as caught:
        client.edit_comment(REPO, 424242, "x")
    assert caught.value.status == 404
    for issued in fake.issued_tokens:
        assert issued.token not in str(caught.value)


def test_a_wrong_private_key_is_rejected(fake: FakeGitHub) -> None:
    other = FakeGitHub(validate_openapi=False)  # only for its freshly generated key
    try:
        impostor = GitHubAppClient(fake.app_id, other.private_key_pem, fake.api_url,
                                   max_tries=1)
        with pytest.raises(GitHubError) as caught:
            impostor.installation_token(REPO)
        assert caught.value.status == 401
    finally:
        other.stop()


def test_expired_tokens_are_refused(fake: FakeGitHub) -> None:
    token = fake.mint_token(fake.installation_id).token
    fake.expire_tokens()
    answer = httpx.get(f"{fake.api_url}/repos/{OWNER}/{NAME}",
                       headers={"Authorization": f"token {token}"})
    assert answer.status_code == 401


# -- git smart HTTP ---------------------------------------------------------------------


def test_git_clone_and_push_with_a_token_via_askpass(client: GitHubAppClient, fake: FakeGitHub,
                                                     tmp_path: Path) -> None:
    token = client.installation_token(REPO)
    env = askpass_env(tmp_path, token)
    url = client.clone_url(REPO)
    assert token not in url
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", url, str(work), env=env)
    assert (work / "calc.py").read_text() == FILES["calc.py"]
    git(work, "checkout", "-q", "-b", "frognano/issue-7")
    (work / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(work, "commit", "-qam", "fix add")
    git(work, "push", "-q", "origin", "frognano/issue-7", env=env)
    head = git(work, "rev-parse", "HEAD").stdout.strip()
    assert fake.branch_sha(OWNER, NAME, "frognano/issue-7") == head
    assert token not in (work / ".git/config").read_text()
    # A force-push (a re-run) replaces the branch.
    git(work, "commit", "-q", "--amend", "-m", "fix add, again")
    git(work, "push", "-q", "--force", "origin", "frognano/issue-7", env=env)
    assert fake.branch_sha(OWNER, NAME, "frognano/issue-7") == git(
        work, "rev-parse", "HEAD").stdout.strip()
    git_requests = [r for r in fake.requests if r.kind == "git"]
    assert git_requests and all(r.credential == token for r in git_requests if r.status == 200)


def test_git_over_an_extra_header(fake: FakeGitHub, tmp_path: Path) -> None:
    token = fake.mint_token(fake.installation_id).token
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    git(tmp_path, "-c", f"http.extraHeader=Authorization: Basic {basic}", "clone", "-q",
        fake.clone_url(OWNER, NAME), str(tmp_path / "w"), env=env)
    assert (tmp_path / "w/README.md").exists()


@pytest.mark.parametrize("token", [None, "ghs_not-a-real-token", "expired"])
def test_git_rejects_missing_bad_and_expired_tokens(fake: FakeGitHub, tmp_path: Path,
                                                    token: str | None) -> None:
    if token == "expired":
        token = fake.mint_token(fake.installation_id).token
        fake.expire_tokens()
    env = askpass_env(tmp_path, token) if token else {
        **os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false"}
    done = git(tmp_path, "clone", "-q", fake.clone_url(OWNER, NAME), str(tmp_path / "w"),
               env=env, check=False)
    assert done.returncode != 0
    raw = httpx.get(f"{fake.clone_url(OWNER, NAME)}/info/refs?service=git-upload-pack")
    assert raw.status_code == 401
    assert raw.headers["www-authenticate"].startswith("Basic")


# -- the OpenAPI check itself -----------------------------------------------------------


def test_openapi_check_catches_an_invalid_request(fake: FakeGitHub) -> None:
    token = fake.mint_token(fake.installation_id).token
    httpx.post(f"{fake.api_url}/repos/{OWNER}/{NAME}/issues/7/comments",
               json={"body": 42}, headers={"Authorization": f"token {token}"})
    httpx.get(f"{fake.api_url}/repos/{OWNER}/{NAME}/pulls", params={"state": "merged"},
              headers={"Authorization": f"token {token}"})
    found, fake.violations[:] = list(fake.violations), []  # expected here; not a failure
    assert len(found) == 2
    assert "42 is not of type 'string'" in found[0]
    assert "'merged' is not one of" in found[1]
