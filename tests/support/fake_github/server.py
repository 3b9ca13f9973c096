"""`FakeGitHub`: the state of a small GitHub, its setup helpers and its server's life.

One App (id, RSA key pair made here), one installation, repositories backed by
bare git repositories on disk. Tests set it up with `add_repo`, `add_issue` and
`set_permission`, point the client at `api_url`, and read back `comments`,
`pulls`, `labels`, `reactions`, `requests` and `issued_tokens`.
"""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.app_manifest import PERMISSIONS as MANIFEST_PERMISSIONS
from tests.support.fake_github.checks import CheckState
from tests.support.fake_github.openapi_spec import OpenApiChecker

INSTALLATION_ID = 4242
APP_ID = 123456
APP_SLUG = "frognano"
# GitHub refuses a push that creates or changes a workflow file unless the App holds the
# `workflows` permission (the bot's manifest leaves it out on purpose): each bare
# repository's pre-receive hook does the same, told the permission in this variable.
WORKFLOWS_ENV = "FAKE_GITHUB_WORKFLOWS_PERMISSION"
WORKFLOWS_HOOK = f"""
import os, subprocess, sys
if os.environ.get("{WORKFLOWS_ENV}") == "write":
    sys.exit(0)
def git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True).stdout.splitlines()
for line in sys.stdin:
    old, new, ref = line.split()
    if set(new) == {{"0"}}:
        continue  # a deleted branch
    for commit in git("rev-list", new, "--not", "--all"):
        for path in git("diff-tree", "-r", "--no-commit-id", "--name-only", "--root", "-m",
                        commit):
            if path.startswith(".github/workflows/"):
                print(f"refusing to allow a GitHub App to create or update workflow "
                      f"`{{path}}` without `workflows` permission", file=sys.stderr)
                sys.exit(1)
"""
ROLE_TO_PERMISSION = {"admin": "admin", "maintain": "write", "write": "write",
                      "triage": "read", "read": "read", "none": "none"}


@dataclass
class IssuedToken:
    token: str
    installation_id: int
    expires_at: datetime

    def valid(self) -> bool:
        return datetime.now(UTC) < self.expires_at


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    status: int
    body: Any  # parsed JSON when it was JSON, else text (git bodies are left out)
    credential: str | None  # the installation token or "jwt:<iss>" it carried
    kind: str  # "api", "app" or "git"
    api_version: str | None = None  # the X-GitHub-Api-Version header it carried
    at: float = field(default_factory=time.monotonic)  # when it was answered


@dataclass
class ManifestCode:
    """A code GitHub hands back after someone confirmed an App manifest on its web page."""

    code: str
    manifest: dict[str, Any]
    org: str | None
    used: bool = False


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int
    headers: dict[str, str]
    body: dict[str, Any]
    times: int
    # "before": close the connection without serving the request; "after": serve it (the
    # change happens) and close the connection instead of answering; None: answer `status`.
    drop: str | None = None


@dataclass
class Hook:
    method: str
    path: re.Pattern[str]
    action: Callable[[], None]
    times: int


@dataclass
class RateLimit:
    """The installation's primary REST rate limit, kept as GitHub keeps it: each request
    with an installation token spends one; at `reset` (epoch seconds) the window starts
    again with `limit`; with none left the answer is a 403 that says when it resets."""

    # An installation gets 5,000 an hour, more with its repositories and users, at most
    # 12,500: the fake is a large one, so a load scenario's thousands of requests fit.
    limit: int = 12_500
    remaining: int = 12_500
    reset: int = field(default_factory=lambda: int(time.time()) + 3600)

    def spend(self) -> bool:
        """One request's worth; False when none is left in this window."""
        now = time.time()
        if now >= self.reset:
            self.remaining, self.reset = self.limit, int(now) + 3600
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        return True

    def headers(self) -> dict[str, str]:
        return {"X-RateLimit-Limit": str(self.limit),
                "X-RateLimit-Remaining": str(self.remaining),
                "X-RateLimit-Used": str(self.limit - self.remaining),
                "X-RateLimit-Reset": str(self.reset), "X-RateLimit-Resource": "core"}


@dataclass
class Comment:
    id: int
    owner: str
    repo: str
    issue_number: int
    user: str
    body: str
    created_at: datetime
    updated_at: datetime


@dataclass
class Label:
    id: int
    name: str
    color: str
    description: str | None


@dataclass
class Reaction:
    id: int
    owner: str
    repo: str
    subject: str  # "issue" or "comment"
    subject_id: int  # issue number or comment id
    content: str
    user: str
    created_at: datetime


@dataclass
class Issue:
    id: int
    number: int
    title: str
    body: str
    user: str
    state: str = "open"
    labels: list[str] = field(default_factory=list)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class ReviewComment:
    """A comment of a submitted PR review (what the bot reads as review feedback)."""

    id: int
    owner: str
    repo: str
    pull_number: int
    review_id: int
    user: str
    body: str
    path: str
    line: int | None
    diff_hunk: str
    commit_id: str
    in_reply_to: int | None = None
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class Pull:
    id: int
    number: int
    title: str
    body: str
    head: str
    base: str
    draft: bool
    user: str
    state: str = "open"
    requested_reviewers: list[str] = field(default_factory=list)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class Repo:
    id: int
    owner: str
    name: str
    default_branch: str
    bare_path: Path
    installation_id: int
    issues: dict[int, Issue] = field(default_factory=dict)
    pulls: dict[int, Pull] = field(default_factory=dict)
    labels: dict[str, Label] = field(default_factory=dict)  # keyed by lower-case name
    roles: dict[str, str] = field(default_factory=dict)  # user -> admin/maintain/.../none
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def next_number(self) -> int:
        return max([0, *self.issues, *self.pulls]) + 1


class FakeGitHub:
    """A local, stateful GitHub: REST for the bot's verbs plus git smart HTTP."""

    def __init__(self, root: Path | None = None, *, token_ttl: timedelta = timedelta(hours=1),
                 validate_openapi: bool = True) -> None:
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="fake-github-")) if root is None else root
        self.git_root = self.root / "git"
        self.git_root.mkdir(parents=True, exist_ok=True)
        self.app_id = APP_ID
        self.app_slug = APP_SLUG
        self.installation_id = INSTALLATION_ID
        self.token_ttl = token_ttl
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption()).decode()
        self.public_key = key.public_key()
        self.checker = OpenApiChecker() if validate_openapi else None
        self.lock = threading.RLock()
        self.repos: dict[tuple[str, str], Repo] = {}
        self.users: dict[str, int] = {}
        self._comments: dict[int, Comment] = {}
        self._review_comments: dict[int, ReviewComment] = {}
        self.reactions: list[Reaction] = []
        self.requests: list[RecordedRequest] = []
        self.issued_tokens: list[IssuedToken] = []
        self.violations: list[str] = []  # OpenAPI findings on requests and responses
        self.faults: list[Fault] = []
        self.rate_limit = RateLimit()  # the one installation's
        # What the installation was granted: by default what the bot's manifest asks
        # for, so every test proves that list suffices (GitHub's 403 otherwise).
        self.installation_permissions: dict[str, str] = dict(MANIFEST_PERMISSIONS)
        self.hooks: list[Hook] = []
        self.checks = CheckState()  # check runs and Actions logs (checks.py)
        self.manifest_codes: dict[str, ManifestCode] = {}  # the App manifest flow
        self.webhook_secret: str | None = None  # set when an App is made from a manifest
        self._ids = iter(range(1_000_001, 10**9))
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.user_id(self.bot_login, bot=True)

    # -- addresses ----------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def bot_login(self) -> str:
        return f"{self.app_slug}[bot]"

    def clone_url(self, owner: str, name: str) -> str:
        return f"{self.api_url}/{owner}/{name}.git"

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeGitHub:
        from tests.support.fake_github.api import build_app  # api imports this module

        config = uvicorn.Config(with_connection_abort(build_app(self)), host="127.0.0.1", port=0,
                                log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="fake-github",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake GitHub did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- setup helpers --------------------------------------------------------------------

    def next_id(self) -> int:
        return next(self._ids)

    def user_id(self, login: str, *, bot: bool = False) -> int:
        with self.lock:
            if login not in self.users:
                self.users[login] = self.next_id()
            return self.users[login]

    def add_repo(self, owner: str, name: str, source: Path | dict[str, str],
                 default_branch: str = "main") -> Repo:
        """A repository from a git working tree (all its branches) or from files."""
        bare = self.git_root / owner / f"{name}.git"
        bare.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, dict):
            work = Path(tempfile.mkdtemp(dir=self.root))
            for relative, text in source.items():
                (work / relative).parent.mkdir(parents=True, exist_ok=True)
                (work / relative).write_text(text)
            _git(work, "init", "-q", "-b", default_branch)
            _git(work, "add", "-A")
            _git(work, "commit", "-q", "-m", "initial")
            source = work
        _git(self.root, "clone", "-q", "--bare", str(source), str(bare))
        _git(bare, "symbolic-ref", "HEAD", f"refs/heads/{default_branch}")
        _git(bare, "config", "http.receivepack", "true")
        hook = bare / "hooks" / "pre-receive"
        hook.parent.mkdir(exist_ok=True)
        hook.write_text(f"#!{sys.executable}\n{WORKFLOWS_HOOK}")
        hook.chmod(0o755)
        self.user_id(owner)
        repo = Repo(id=self.next_id(), owner=owner, name=name, default_branch=default_branch,
                    bare_path=bare, installation_id=self.installation_id)
        with self.lock:
            self.repos[(owner, name)] = repo
        return repo

    def add_issue(self, owner: str, repo: str, number: int, title: str, body: str = "",
                  author: str = "octocat") -> Issue:
        self.user_id(author)
        issue = Issue(id=self.next_id(), number=number, title=title, body=body, user=author)
        with self.lock:
            self.repo(owner, repo).issues[number] = issue
        return issue

    def set_permission(self, owner: str, repo: str, user: str, permission: str) -> None:
        """Make `user` a collaborator with a role: admin, maintain, write, triage or read."""
        if permission not in ROLE_TO_PERMISSION:
            raise ValueError(f"unknown permission {permission!r}")
        self.user_id(user)
        with self.lock:
            self.repo(owner, repo).roles[user] = permission

    def add_comment(self, owner: str, repo: str, number: int, body: str, author: str) -> Comment:
        """A comment by someone else, as if posted on github.com."""
        self.user_id(author)
        now = datetime.now(UTC)
        comment = Comment(id=self.next_id(), owner=owner, repo=repo, issue_number=number,
                          user=author, body=body, created_at=now, updated_at=now)
        with self.lock:
            self._comments[comment.id] = comment
        return comment

    def add_review_comment(self, owner: str, repo: str, pull_number: int, review_id: int,
                           author: str, body: str, *, path: str, line: int | None,
                           diff_hunk: str) -> ReviewComment:
        """A comment of review `review_id` on PR `pull_number`, as if submitted on github.com."""
        self.user_id(author)
        pull = self.repo(owner, repo).pulls[pull_number]
        comment = ReviewComment(
            id=self.next_id(), owner=owner, repo=repo, pull_number=pull_number,
            review_id=review_id, user=author, body=body, path=path, line=line,
            diff_hunk=diff_hunk, commit_id=self.branch_sha(owner, repo, pull.head) or "0" * 40)
        with self.lock:
            self._review_comments[comment.id] = comment
        return comment

    def reply_to_review_comment(self, owner: str, repo: str, pull_number: int,
                                comment_id: int, author: str, body: str) -> ReviewComment:
        """A reply in the thread of review comment `comment_id` (KeyError: none such)."""
        parent = self._review_comments[comment_id]
        if (parent.owner, parent.repo, parent.pull_number) != (owner, repo, pull_number):
            raise KeyError(comment_id)
        reply = ReviewComment(
            id=self.next_id(), owner=owner, repo=repo, pull_number=pull_number,
            review_id=parent.review_id, user=author, body=body, path=parent.path,
            line=parent.line, diff_hunk=parent.diff_hunk, commit_id=parent.commit_id,
            in_reply_to=parent.id)
        with self.lock:
            self._review_comments[reply.id] = reply
        return reply

    def pull_review_comments(self, owner: str, repo: str, pull_number: int
                             ) -> list[ReviewComment]:
        with self.lock:
            return [c for c in self._review_comments.values()
                    if (c.owner, c.repo, c.pull_number) == (owner, repo, pull_number)]

    def review_comments(self, owner: str, repo: str, pull_number: int,
                        review_id: int) -> list[ReviewComment]:
        with self.lock:
            return [c for c in self._review_comments.values()
                    if (c.owner, c.repo, c.pull_number, c.review_id)
                    == (owner, repo, pull_number, review_id)]

    def add_label(self, owner: str, repo: str, name: str, color: str = "ededed",
                  description: str | None = None) -> Label:
        label = Label(self.next_id(), name, color, description)
        with self.lock:
            self.repo(owner, repo).labels[name.lower()] = label
        return label

    def fail_next(self, method: str, path_regex: str, status: int,
                  headers: dict[str, str] | None = None, *, times: int = 1,
                  message: str = "injected failure") -> None:
        """Answer the next `times` matching requests with `status` instead of serving them."""
        self.answer_next(method, path_regex, status, {"message": message}, headers,
                         times=times)

    def answer_next(self, method: str, path_regex: str, status: int, body: dict[str, Any],
                    headers: dict[str, str] | None = None, *, times: int = 1) -> None:
        """Answer the next `times` matching requests with `body`, unserved: a failure, or
        GitHub holding something else than it was sent (a test of the bot's check of it)."""
        with self.lock:
            self.faults.append(Fault(method.upper(), re.compile(path_regex), status,
                                     dict(headers or {}), dict(body), times))

    def rate_limit_next(self, method: str, path_regex: str, *, reset_in_s: float,
                        status: int = 403, times: int = 1) -> int:
        """The next `times` matching requests meet a spent primary rate limit, answered as
        GitHub does: `status` (403, or 429) with `X-RateLimit-Remaining: 0` and the reset
        as epoch seconds in `X-RateLimit-Reset`. Returns that reset time."""
        reset = int(time.time() + reset_in_s)
        limit = str(self.rate_limit.limit)
        headers = {"X-RateLimit-Limit": limit, "X-RateLimit-Remaining": "0",
                   "X-RateLimit-Used": limit, "X-RateLimit-Reset": str(reset),
                   "X-RateLimit-Resource": "core"}
        with self.lock:
            self.faults.append(Fault(method.upper(), re.compile(path_regex), status, headers, {
                "message": f"API rate limit exceeded for installation ID "
                           f"{self.installation_id}.",
                "documentation_url": "https://docs.github.com/rest/using-the-rest-api/"
                                     "rate-limits-for-the-rest-api"}, times))
        return reset

    def spend_rate_limit(self, *, remaining: int = 0, reset_in_s: float) -> int:
        """Leave `remaining` requests in the installation's window, which resets in
        `reset_in_s` (every request after those gets GitHub's 403). Returns the reset."""
        with self.lock:
            self.rate_limit.remaining = remaining
            self.rate_limit.reset = int(time.time() + reset_in_s)
            return self.rate_limit.reset

    def grants(self, accepted: str) -> bool:
        """Whether the installation holds one of `accepted`'s permission sets (the
        X-Accepted-GitHub-Permissions form: "a=read,b=write; c=write"); write covers read."""
        rank = {"read": 1, "write": 2, "admin": 3}
        with self.lock:
            held = dict(self.installation_permissions)
        for alternative in accepted.split(";"):
            parts = [p.strip().partition("=") for p in alternative.split(",") if p.strip()]
            if all(rank.get(held.get(name, ""), 0) >= rank.get(level, 9)
                   for name, _, level in parts):
                return True
        return False

    def deny_permission(self, method: str, path_regex: str, accepted: str, *,
                        times: int = 1) -> None:
        """The next `times` matching requests are refused as they are when the App lacks a
        permission: 403 "Resource not accessible by integration", with the permission
        sets that would do in `X-Accepted-GitHub-Permissions` (e.g. "issues=write")."""
        with self.lock:
            self.faults.append(Fault(
                method.upper(), re.compile(path_regex), 403,
                {"X-Accepted-GitHub-Permissions": accepted},
                {"message": "Resource not accessible by integration",
                 "documentation_url": "https://docs.github.com/rest", "status": "403"},
                times))

    def drop_next(self, method: str, path_regex: str, *, after_processing: bool = False,
                  times: int = 1) -> None:
        """Close the connection of the next `times` matching requests without an answer;
        with `after_processing` the request takes effect first (only the answer is lost)."""
        with self.lock:
            self.faults.append(Fault(method.upper(), re.compile(path_regex), 0, {}, {}, times,
                                     "after" if after_processing else "before"))

    def on_next(self, method: str, path_regex: str, action: Callable[[], None], *,
                times: int = 1) -> None:
        """Call `action` when the next `times` matching requests arrive, before they are
        served (and before any fault): a test acts at that moment, e.g. pushes to a branch
        while the bot's push is in flight. It runs in a thread; the fake keeps serving."""
        with self.lock:
            self.hooks.append(Hook(method.upper(), re.compile(path_regex), action, times))

    def take_hook(self, method: str, path: str) -> Callable[[], None] | None:
        with self.lock:
            for hook in self.hooks:
                if hook.method == method and hook.path.search(path):
                    hook.times -= 1
                    if hook.times <= 0:
                        self.hooks.remove(hook)
                    return hook.action
        return None

    def confirm_manifest(self, manifest: dict[str, Any], org: str | None) -> ManifestCode:
        """What github.com does when the user confirms a posted manifest: a one-time code."""
        confirmed = ManifestCode(secrets.token_hex(10), manifest, org)
        with self.lock:
            self.manifest_codes[confirmed.code] = confirmed
        return confirmed

    def convert_manifest(self, code: str) -> ManifestCode | None:
        """The code's manifest, once; the App it makes is this fake's App (same id and key),
        renamed, so a bot set up through the flow can then talk to this fake."""
        with self.lock:
            confirmed = self.manifest_codes.get(code)
            if confirmed is None or confirmed.used:
                return None
            confirmed.used = True
            self.app_slug = re.sub(r"[^a-z0-9]+", "-",
                                   str(confirmed.manifest.get("name", "app")).lower()).strip("-")
            self.webhook_secret = secrets.token_hex(20)
            self.user_id(self.bot_login, bot=True)
            return confirmed

    def expire_tokens(self) -> None:
        """Every installation token minted so far stops working (as after an hour)."""
        with self.lock:
            for issued in self.issued_tokens:
                issued.expires_at = datetime.now(UTC) - timedelta(seconds=1)

    def mint_token(self, installation_id: int) -> IssuedToken:
        issued = IssuedToken("ghs_" + secrets.token_urlsafe(27), installation_id,
                             datetime.now(UTC).replace(microsecond=0) + self.token_ttl)
        with self.lock:
            self.issued_tokens.append(issued)
        return issued

    def valid_token(self, token: str) -> IssuedToken | None:
        with self.lock:
            for issued in self.issued_tokens:
                if secrets.compare_digest(issued.token, token) and issued.valid():
                    return issued
        return None

    # -- inspection -----------------------------------------------------------------------

    def repo(self, owner: str, name: str) -> Repo:
        return self.repos[(owner, name)]

    def comments(self, owner: str, repo: str, number: int) -> list[Comment]:
        with self.lock:
            return [c for c in self._comments.values()
                    if (c.owner, c.repo, c.issue_number) == (owner, repo, number)]

    def comment_by_id(self, comment_id: int) -> Comment | None:
        return self._comments.get(comment_id)

    def pulls(self, owner: str, repo: str) -> list[Pull]:
        with self.lock:
            return list(self.repo(owner, repo).pulls.values())

    def labels(self, owner: str, repo: str) -> dict[str, Label]:
        """The repository's labels by name."""
        with self.lock:
            return {label.name: label for label in self.repo(owner, repo).labels.values()}

    def issue_labels(self, owner: str, repo: str, number: int) -> list[str]:
        return list(self.repo(owner, repo).issues[number].labels)

    def branch_sha(self, owner: str, repo: str, branch: str) -> str | None:
        """The commit a branch points at in the bare repository, or None."""
        done = subprocess.run(["git", "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
                              cwd=self.repo(owner, repo).bare_path, capture_output=True,
                              text=True, check=False)
        return done.stdout.strip() or None

    def api_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.kind != "git"]


ABORT_EXTENSION = "fake.abort_connection"


def with_connection_abort(app: Any) -> Any:
    """Give the app a way to drop its connection without answering: uvicorn's own `send`
    (a bound method of the request cycle) knows the transport; it is put in the scope's
    extensions before any middleware wraps `send`."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        cycle = getattr(send, "__self__", None)
        if scope["type"] == "http" and cycle is not None and hasattr(cycle, "transport"):
            scope.setdefault("extensions", {})[ABORT_EXTENSION] = cycle.transport.abort
        await app(scope, receive, send)

    return wrapped


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=Fake GitHub", "-c", "user.email=fake@example.invalid", *args],
        cwd=cwd, check=True, capture_output=True, text=True).stdout
