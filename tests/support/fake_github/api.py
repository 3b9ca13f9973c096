"""The fake's HTTP face: REST routes for the bot's verbs, auth, recording, git smart HTTP.

A pure ASGI middleware sees every exchange: it injects faults, checks
credentials (App JWT on /app*, installation tokens elsewhere, Basic auth for
git), hands git paths to `git http-backend`, records each exchange and runs
the OpenAPI checks on the REST ones.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode

import anyio
import jwt
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.support.fake_github import objects
from tests.support.fake_github.checks import DOWNLOAD_PREFIX, register_check_routes
from tests.support.fake_github.git_data import add_git_data_routes
from tests.support.fake_github.git_http import run_http_backend
from tests.support.fake_github.openapi_spec import DESCRIPTION_API_VERSION
from tests.support.fake_github.server import (
    ABORT_EXTENSION,
    ROLE_TO_PERMISSION,
    WORKFLOWS_ENV,
    Comment,
    FakeGitHub,
    Issue,
    Label,
    Pull,
    Reaction,
    RecordedRequest,
    Repo,
    ReviewComment,
)

_GIT_PATH = re.compile(r"^/(?P<owner>[^/]+)/(?P<name>[^/]+)\.git(?P<rest>/.*)?$")
_API_PREFIXES = ("repos", "app", "users", "orgs", "user", "installation")
# github.com's pages where a user confirms an App manifest (no API: no auth, no OpenAPI).
_MANIFEST_PAGE = re.compile(r"^(/organizations/(?P<org>[^/]+))?/settings/apps/new$")
# The code in the path is the credential of this one endpoint.
_UNAUTHENTICATED = re.compile(r"^/app-manifests/[^/]+/conversions$")
# The permission sets GitHub accepts for each REST route the bot uses (its docs'
# "Permissions required for GitHub Apps", as sent in X-Accepted-GitHub-Permissions).
# A route missing here is a violation: add it with its permissions from those docs.
_REPO = r"^/repos/[^/]+/[^/]+"
_ISSUES_READ = "issues=read; pull_requests=read"  # an issue's, or a PR's as an issue
_ISSUES_WRITE = "issues=write; pull_requests=write"
_ROUTE_PERMISSIONS: list[tuple[str, re.Pattern[str], str]] = [
    (m, re.compile(_REPO + p), a) for m, p, a in (
    ("GET", r"$", "metadata=read"),
    ("GET", r"/contents/.+$", "contents=read"),
    ("GET", r"/collaborators/[^/]+/permission$", "metadata=read"),
    ("GET", r"/issues/\d+$", _ISSUES_READ),
    ("GET", r"/issues/\d+/comments$", _ISSUES_READ),
    ("POST", r"/issues/\d+/comments$", _ISSUES_WRITE),
    ("GET", r"/issues/comments/\d+$", _ISSUES_READ),
    ("PATCH", r"/issues/comments/\d+$", _ISSUES_WRITE),
    ("POST", r"/issues/\d+/reactions$", _ISSUES_WRITE),
    ("POST", r"/issues/comments/\d+/reactions$", _ISSUES_WRITE),
    ("GET", r"/labels/[^/]+$", _ISSUES_READ),
    ("POST", r"/labels$", _ISSUES_WRITE),
    ("POST", r"/issues/\d+/labels$", _ISSUES_WRITE),
    ("DELETE", r"/issues/\d+/labels/[^/]+$", _ISSUES_WRITE),
    ("GET", r"/pulls$", "pull_requests=read"),
    ("POST", r"/pulls$", "pull_requests=write"),
    ("GET", r"/pulls/\d+$", "pull_requests=read"),
    ("PATCH", r"/pulls/\d+$", "pull_requests=write"),
    ("GET", r"/pulls/\d+/reviews/\d+/comments$", "pull_requests=read"),
    ("GET", r"/pulls/\d+/comments$", "pull_requests=read"),
    ("POST", r"/pulls/\d+/comments/\d+/replies$", "pull_requests=write"),
    ("POST", r"/pulls/\d+/requested_reviewers$", "pull_requests=write"),
    # Checks and Actions (tests/support/fake_github/checks.py): a red CI on the bot's PR.
    ("GET", r"/commits/[^/]+/check-runs$", "checks=read"),
    ("GET", r"/actions/jobs/\d+/logs$", "actions=read"),
    ("GET", r"/commits/[^/]+$", "contents=read"),
    ("GET", r"/pulls/\d+/reviews$", "pull_requests=read"),
    # The Git Data API (tests/support/fake_github/git_data.py): the bot's signed commits.
    ("POST", r"/git/(blobs|trees|commits|refs)$", "contents=write"),
    ("PATCH", r"/git/refs/.+$", "contents=write"),
    ("GET", r"/git/(commits/[0-9a-f]{40}|ref/.+)$", "contents=read"),
)]
_REACTIONS = {"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"}
# GitHub's limit on the body of an issue, a pull request or a comment.
BODY_LIMIT = 65536


class GitHubError(Exception):
    def __init__(self, status: int, message: str, errors: list[dict[str, Any]] | None = None):
        self.status, self.message, self.errors = status, message, errors


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


class FakeGitHubMiddleware:
    def __init__(self, app: ASGIApp, fake: FakeGitHub) -> None:
        self.app, self.fake = app, fake

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        method: str = scope["method"]
        path: str = scope["path"]
        query = dict(parse_qsl(scope["query_string"].decode(), keep_blank_values=True))
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        git = _GIT_PATH.match(path)
        kind = "git" if git and path.split("/")[1] not in _API_PREFIXES else (
            "app" if path == "/app" or path.startswith("/app/") else "api")
        if _MANIFEST_PAGE.match(path) or path.startswith(DOWNLOAD_PREFIX):
            kind = "web"

        if kind in ("api", "app") and self.fake.checker is not None:
            errors = self.fake.checker.request_errors(method, path, query, body,
                                                      headers.get("content-type", ""))
            self.fake.violations += [f"{method} {path}: {e}" for e in errors]

        status_box: dict[str, Any] = {}
        sent_body = bytearray()

        async def recording_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_box["status"] = message["status"]
                if counted:  # GitHub tells every REST answer where the limit stands
                    message = {**message, "headers": [
                        *message.get("headers", []),
                        *((k.lower().encode(), v.encode()) for k, v in counted.items())]}
            elif message["type"] == "http.response.body":
                sent_body.extend(message.get("body", b""))
                if not message.get("more_body"):
                    # Recorded before the client sees the end, so tests read it in order.
                    self._record(method, path, query, body, headers, kind, credential,
                                 status_box.get("status", 500), bytes(sent_body),
                                 checked=fault is None and denial is None)
            await send(message)

        hook = self.fake.take_hook(method, path)
        if hook is not None:
            await anyio.to_thread.run_sync(hook)
        fault = self._take_fault(method, path)
        credential, denial = self._authenticate(kind, headers, path)
        if kind in ("api", "app") and denial is None:
            denial = self._version_denial(method, path, headers)
        counted: dict[str, str] = {}
        if kind == "api" and denial is None and fault is None and credential is not None:
            denial, counted = self._spend_rate_limit()
            if denial is None:
                denial = self._permission_denial(method, path)
        elif kind == "git" and denial is None and fault is None:
            denial = self._git_permission_denial(path, query)
        if fault is not None and fault.drop is not None:
            await self._drop(scope, fault.drop, body, credential, denial,
                             headers if kind == "git" else None)
            return
        if fault is not None:
            response: Response = _json(fault.status, fault.body, fault.headers)
        elif denial is not None:
            response = denial
        elif kind == "git":
            assert git is not None
            response = await self._git(scope, method, headers, body)
        else:
            response = None  # type: ignore[assignment]

        if response is not None:
            await response(scope, receive, recording_send)
        else:
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            scope.setdefault("state", {})["credential"] = credential
            await self.app(scope, replay, recording_send)

    async def _drop(self, scope: Scope, when: str, body: bytes, credential: str | None,
                    denial: Response | None, git_headers: dict[str, str] | None = None
                    ) -> None:
        """Close the connection without an answer; for "after", serve the request first
        (recorded as status 0, never checked: the client saw no response). A git request
        (`git_headers`) is served by git itself: a push takes effect, its answer is lost."""
        if when == "after" and denial is None and git_headers is not None:
            await self._git(scope, scope["method"], git_headers, body)
        elif when == "after" and denial is None:
            sent = False

            async def replay() -> Message:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return {"type": "http.disconnect"}

            async def swallow(message: Message) -> None:
                return None

            scope.setdefault("state", {})["credential"] = credential
            await self.app(scope, replay, swallow)
        self.fake.requests.append(RecordedRequest(
            scope["method"], scope["path"], {}, 0, _decode(body), credential, "dropped"))
        scope["extensions"][ABORT_EXTENSION]()
        await anyio.sleep(0.05)  # let the server see the connection lost before returning

    def _record(self, method: str, path: str, query: dict[str, str], body: bytes,
                headers: dict[str, str], kind: str, credential: str | None, status: int,
                response_body: bytes, *, checked: bool) -> None:
        self.fake.requests.append(RecordedRequest(
            method, path, query, status, _decode(body) if kind != "git" else None,
            credential, kind, headers.get("x-github-api-version")))
        if kind in ("api", "app") and checked and 200 <= status < 300 and \
                self.fake.checker is not None:
            errors = self.fake.checker.response_errors(
                method, path, query, body, headers.get("content-type", ""), status,
                response_body)
            self.fake.violations += [f"response to {method} {path}: {e}" for e in errors]

    def _take_fault(self, method: str, path: str) -> Any:
        with self.fake.lock:
            for fault in self.fake.faults:
                if fault.method == method and fault.path.search(path):
                    fault.times -= 1
                    if fault.times <= 0:
                        self.fake.faults.remove(fault)
                    return fault
        return None

    def _permission_denial(self, method: str, path: str) -> Response | None:
        """GitHub's 403 for a route the installation's permissions do not cover."""
        accepted = next((a for m, pattern, a in _ROUTE_PERMISSIONS
                         if m == method and pattern.match(path)), None)
        if accepted is None:
            if path.startswith("/repos/"):
                self.fake.violations.append(f"{method} {path}: no App permission known for "
                                            "this route (tests/support/fake_github/api.py)")
            return None
        if self.fake.grants(accepted):
            return None
        return _json(403, objects.error("Resource not accessible by integration", 403),
                     {"X-Accepted-GitHub-Permissions": accepted})

    def _git_permission_denial(self, path: str, query: dict[str, str]) -> Response | None:
        """A fetch needs contents: read, a push contents: write (git's own answer)."""
        pushing = path.endswith("/git-receive-pack") or query.get("service") == \
            "git-receive-pack"
        if self.fake.grants("contents=write" if pushing else "contents=read"):
            return None
        repo = path.split(".git", 1)[0].lstrip("/")
        return Response(f"Permission to {repo}.git denied to {self.fake.bot_login}.\n",
                        status_code=403)

    def _spend_rate_limit(self) -> tuple[Response | None, dict[str, str]]:
        """An installation token's request spends from its window; with nothing left,
        GitHub's 403 (the App JWT and git have their own limits, not modelled)."""
        with self.fake.lock:
            allowed = self.fake.rate_limit.spend()
            headers = self.fake.rate_limit.headers()
        if allowed:
            return None, headers
        return _json(403, {
            "message": f"API rate limit exceeded for installation ID "
                       f"{self.fake.installation_id}.",
            "documentation_url": "https://docs.github.com/rest/using-the-rest-api/"
                                 "rate-limits-for-the-rest-api"}, headers), {}

    def _version_denial(self, method: str, path: str,
                        headers: dict[str, str]) -> Response | None:
        """GitHub answers 400 to an API version it does not serve; the fake serves only
        its description's (no header means that one, as on GitHub). Also a violation: a
        client speaking another version is checked against the wrong description."""
        asked = headers.get("x-github-api-version")
        if asked is None or asked == DESCRIPTION_API_VERSION:
            return None
        self.fake.violations.append(
            f"{method} {path}: X-GitHub-Api-Version {asked}, but the OpenAPI description "
            f"is {DESCRIPTION_API_VERSION}'s")
        return _json(400, objects.error(
            f"Unsupported 'X-GitHub-Api-Version' header: {asked}. Supported versions are: "
            f"{DESCRIPTION_API_VERSION}", 400))

    def _authenticate(self, kind: str, headers: dict[str, str],
                      path: str) -> tuple[str | None, Response | None]:
        authorization = headers.get("authorization", "")
        scheme, _, value = authorization.partition(" ")
        if kind == "web" or _UNAUTHENTICATED.match(path):
            return None, None
        if kind == "app":
            if scheme.lower() != "bearer":
                return None, _json(401, objects.error(
                    "A JSON web token could not be decoded", 401))
            try:
                claims = jwt.decode(value, self.fake.public_key, algorithms=["RS256"],
                                    options={"require": ["iss", "exp", "iat"]})
            except jwt.PyJWTError as exc:
                return None, _json(401, objects.error(f"'{exc}' (JWT rejected)", 401))
            if str(claims["iss"]) != str(self.fake.app_id):
                return None, _json(401, objects.error("Integration not found", 401))
            return f"jwt:{claims['iss']}", None
        if kind == "git":
            token = None
            if scheme.lower() == "basic":
                user, _, password = base64.b64decode(value).decode(errors="replace").partition(":")
                if user == "x-access-token":
                    token = password
            if token is None or self.fake.valid_token(token) is None:
                return token, Response("Invalid username or token.\n", status_code=401,
                                       headers={"WWW-Authenticate": 'Basic realm="GitHub"'})
            return token, None
        token = value.strip() if scheme.lower() in ("token", "bearer") else ""
        if not token or self.fake.valid_token(token) is None:
            return token or None, _json(401, objects.error("Bad credentials", 401))
        return token, None

    async def _git(self, scope: Scope, method: str, headers: dict[str, str],
                   body: bytes) -> Response:
        def call() -> tuple[int, list[tuple[str, str]], bytes]:
            return run_http_backend(self.fake.git_root, method=method, path=scope["path"],
                                    query=scope["query_string"].decode(), headers=headers,
                                    body=body, remote_user="x-access-token",
                                    extra_env={WORKFLOWS_ENV: self.fake.installation_permissions
                                               .get("workflows", "none")})

        status, cgi_headers, payload = await anyio.to_thread.run_sync(call)
        response = Response(payload, status_code=status)
        for name, value in cgi_headers:
            response.headers.append(name, value)
        return response


def _decode(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body.decode(errors="replace")


def build_app(fake: FakeGitHub) -> FastAPI:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    app.add_middleware(FakeGitHubMiddleware, fake=fake)

    @app.exception_handler(GitHubError)
    async def github_error(_: Request, exc: GitHubError) -> JSONResponse:
        return _json(exc.status, objects.error(exc.message, exc.status, exc.errors))

    def user(login: str) -> dict[str, Any]:
        return objects.user(fake.api_url, login, fake.user_id(login),
                            bot=login.endswith("[bot]"))

    def repo_of(owner: str, name: str, request: Request) -> Repo:
        found = fake.repos.get((owner, name))
        issued = fake.valid_token(request.scope["state"]["credential"] or "")
        # GitHub hides repositories an installation cannot see behind a 404.
        if found is None or issued is None or issued.installation_id != found.installation_id:
            raise GitHubError(404, "Not Found")
        return found

    def repo_json(repo: Repo, *, full: bool = False) -> dict[str, Any]:
        return objects.repository(fake.api_url, user(repo.owner), repo.name, repo.id,
                                  repo.default_branch, repo.created_at, full=full)

    def label_json(repo: Repo, label: Label) -> dict[str, Any]:
        return objects.label(fake.api_url, f"{repo.owner}/{repo.name}", label.id, label.name,
                             label.color, label.description)

    def reactions_on(repo: Repo, subject: str, subject_id: int) -> list[str]:
        return [r.content for r in fake.reactions if (r.owner, r.repo, r.subject,
                r.subject_id) == (repo.owner, repo.name, subject, subject_id)]

    def comment_json(repo: Repo, comment: Comment) -> dict[str, Any]:
        return objects.comment(fake.api_url, f"{repo.owner}/{repo.name}",
                               comment_id=comment.id, issue_number=comment.issue_number,
                               body=comment.body, author=user(comment.user),
                               created=comment.created_at, updated=comment.updated_at,
                               reactions=reactions_on(repo, "comment", comment.id))

    def pull_json(repo: Repo, pull: Pull, *, full: bool = True) -> dict[str, Any]:
        issue = repo.issues.get(pull.number)
        labels = [label_json(repo, repo.labels[n.lower()]) for n in (issue.labels if issue
                                                                    else [])]
        return objects.pull(
            fake.api_url, repo_json(repo), pull_id=pull.id, number=pull.number,
            title=pull.title, body=pull.body, state=pull.state, draft=pull.draft,
            author=user(pull.user), head=pull.head,
            head_sha=fake.branch_sha(repo.owner, repo.name, pull.head) or "0" * 40,
            base_ref=pull.base,
            base_sha=fake.branch_sha(repo.owner, repo.name, pull.base) or "0" * 40,
            labels=labels, reviewers=[user(r) for r in pull.requested_reviewers],
            created=pull.created_at, updated=pull.updated_at, full=full)

    async def json_body(request: Request) -> dict[str, Any]:
        try:
            data = await request.json()
        except ValueError:
            raise GitHubError(400, "Problems parsing JSON") from None
        if not isinstance(data, dict):
            raise GitHubError(400, "Problems parsing JSON")
        return data

    def need_str(data: dict[str, Any], name: str, resource: str) -> str:
        value = data.get(name)
        if not isinstance(value, str) or not value:
            raise GitHubError(422, "Validation Failed",
                              [{"resource": resource, "field": name, "code": "missing_field"}])
        return value

    def body_text(data: dict[str, Any], resource: str, *, required: bool) -> str | None:
        """A body as GitHub takes it: at most 65,536 characters (a 422 above that)."""
        text = need_str(data, "body", resource) if required else data.get("body")
        if text is not None and len(str(text)) > BODY_LIMIT:
            raise GitHubError(422, "Validation Failed", [{
                "resource": resource, "code": "custom", "field": "body",
                "message": f"body is too long (maximum is {BODY_LIMIT} characters)"}])
        return None if text is None else str(text)

    # -- App ------------------------------------------------------------------------------

    @app.get("/app")
    async def get_app() -> JSONResponse:
        return _json(200, objects.app(fake.api_url, fake.app_id, fake.app_slug,
                                      user("frognano-owner"), datetime(2024, 1, 1, tzinfo=UTC)))

    @app.post("/app/installations/{installation_id}/access_tokens")
    async def access_token(installation_id: int) -> JSONResponse:
        if installation_id != fake.installation_id:
            raise GitHubError(404, "Not Found")
        issued = fake.mint_token(installation_id)
        return _json(201, {"token": issued.token, "expires_at": objects.iso(issued.expires_at),
                           "permissions": dict(fake.installation_permissions),
                           "repository_selection": "all"})

    # -- the App manifest flow -------------------------------------------------------------

    async def confirm_manifest(request: Request, org: str | None) -> Response:
        # github.com shows a page to confirm the name; the fake confirms at once.
        form = dict(parse_qsl((await request.body()).decode(), keep_blank_values=True))
        try:
            manifest = json.loads(form.get("manifest", ""))
            redirect_url = str(manifest["redirect_url"])
        except (ValueError, KeyError, TypeError):
            return Response("Invalid GitHub App configuration", status_code=422)
        confirmed = fake.confirm_manifest(manifest, org)
        query = urlencode({"code": confirmed.code, "state": request.query_params.get("state", "")})
        return RedirectResponse(f"{redirect_url}?{query}", status_code=302)

    @app.post("/settings/apps/new")
    async def new_user_app(request: Request) -> Response:
        return await confirm_manifest(request, None)

    @app.post("/organizations/{org}/settings/apps/new")
    async def new_org_app(org: str, request: Request) -> Response:
        return await confirm_manifest(request, org)

    @app.post("/app-manifests/{code}/conversions")
    async def convert_manifest(code: str) -> JSONResponse:
        confirmed = fake.convert_manifest(code)
        if confirmed is None or fake.webhook_secret is None:
            raise GitHubError(404, "Not Found")
        owner = user(confirmed.org or "frognano-owner")
        manifest = confirmed.manifest
        app_json = {**objects.app(fake.api_url, fake.app_id, fake.app_slug, owner,
                                  datetime.now(UTC)), "name": str(manifest.get("name"))}
        return _json(201, objects.app_from_manifest(
            app_json, pem=fake.private_key_pem, webhook_secret=fake.webhook_secret,
            permissions=dict(manifest.get("default_permissions") or {}),
            events=list(manifest.get("default_events") or [])))

    # -- repository and contents ----------------------------------------------------------

    @app.get("/repos/{owner}/{name}")
    async def get_repo(owner: str, name: str, request: Request) -> JSONResponse:
        return _json(200, repo_json(repo_of(owner, name, request), full=True))

    @app.get("/repos/{owner}/{name}/contents/{path:path}")
    async def get_contents(owner: str, name: str, path: str, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        ref = request.query_params.get("ref") or repo.default_branch
        spec = f"{ref}:{path}"
        entry = _tree_entry(repo, ref, path)
        if entry is None:
            raise GitHubError(404, "Not Found")
        mode, kind, sha = entry
        full_name = f"{owner}/{name}"
        if kind == "tree":  # GitHub lists a directory as a JSON array of its entries
            return _json(200, objects.content_directory(
                fake.api_url, full_name, path, ref, _ls_tree(repo, spec)))
        if kind == "commit":  # a submodule's gitlink: GitHub says where it points
            return _json(200, objects.content_other(
                fake.api_url, full_name, path, ref, sha, "submodule",
                submodule_git_url=f"{fake.api_url}/{full_name}-submodule.git"))
        data = subprocess.run(["git", "cat-file", "blob", sha], cwd=repo.bare_path,
                              capture_output=True, check=True).stdout
        if mode == "120000":  # a symlink is served as one, with its target, not as a file
            return _json(200, objects.content_other(
                fake.api_url, full_name, path, ref, sha, "symlink", size=len(data),
                target=data.decode(errors="replace")))
        return _json(200, objects.content_file(fake.api_url, full_name, path, ref, sha, data))

    @app.get("/repos/{owner}/{name}/collaborators/{login}/permission")
    async def get_permission(owner: str, name: str, login: str,
                             request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        if login not in fake.users:
            raise GitHubError(404, f"{login} is not a user")
        role = repo.roles.get(login, "read")  # public repository: everyone may read
        collaborator = {**user(login), "role_name": role,
                        "permissions": {"admin": role == "admin",
                                        "maintain": role in ("admin", "maintain"),
                                        "push": role in ("admin", "maintain", "write"),
                                        "triage": role != "read" and role != "none",
                                        "pull": role != "none"}}
        return _json(200, {"permission": ROLE_TO_PERMISSION[role], "role_name": role,
                           "user": collaborator})

    # -- issues and comments --------------------------------------------------------------

    def issue_json(repo: Repo, number: int) -> dict[str, Any]:
        issue = repo.issues.get(number)
        if issue is None:
            raise GitHubError(404, "Not Found")
        comments = fake.comments(repo.owner, repo.name, number)
        return objects.issue(
            fake.api_url, f"{repo.owner}/{repo.name}", issue_id=issue.id, number=number,
            title=issue.title, body=issue.body, state=issue.state, author=user(issue.user),
            labels=[label_json(repo, repo.labels[n.lower()]) for n in issue.labels],
            comments=len(comments), created=issue.created_at, updated=issue.updated_at,
            reactions=reactions_on(repo, "issue", number), is_pull=number in repo.pulls)

    @app.get("/repos/{owner}/{name}/issues/{number}")
    async def get_issue(owner: str, name: str, number: int, request: Request) -> JSONResponse:
        return _json(200, issue_json(repo_of(owner, name, request), number))

    @app.get("/repos/{owner}/{name}/issues/{number}/comments")
    async def list_comments(owner: str, name: str, number: int,
                            request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        if number not in repo.issues:
            raise GitHubError(404, "Not Found")
        since = request.query_params.get("since")
        after = datetime.fromisoformat(since.replace("Z", "+00:00")) if since else None
        everything = [comment_json(repo, c) for c in fake.comments(owner, name, number)
                      if after is None or c.updated_at >= after]
        per_page = min(int(request.query_params.get("per_page", 30)), 100)
        page = int(request.query_params.get("page", 1))
        chunk = everything[(page - 1) * per_page: page * per_page]
        headers = {}
        if page * per_page < len(everything):
            url = f"{fake.api_url}/repos/{owner}/{name}/issues/{number}/comments"
            headers["Link"] = f'<{url}?per_page={per_page}&page={page + 1}>; rel="next"'
        return _json(200, chunk, headers)

    @app.post("/repos/{owner}/{name}/issues/{number}/comments")
    async def create_comment(owner: str, name: str, number: int,
                             request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        if number not in repo.issues:
            raise GitHubError(404, "Not Found")
        text = body_text(data, "IssueComment", required=True) or ""
        comment = fake.add_comment(owner, name, number, text, fake.bot_login)
        return _json(201, comment_json(repo, comment))

    def find_comment(repo: Repo, comment_id: int) -> Comment:
        comment = fake.comment_by_id(comment_id)
        if comment is None or (comment.owner, comment.repo) != (repo.owner, repo.name):
            raise GitHubError(404, "Not Found")
        return comment

    @app.get("/repos/{owner}/{name}/issues/comments/{comment_id}")
    async def get_comment(owner: str, name: str, comment_id: int,
                          request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        return _json(200, comment_json(repo, find_comment(repo, comment_id)))

    @app.patch("/repos/{owner}/{name}/issues/comments/{comment_id}")
    async def edit_comment(owner: str, name: str, comment_id: int,
                           request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        comment = find_comment(repo, comment_id)
        comment.body = body_text(data, "IssueComment", required=True) or ""
        comment.updated_at = datetime.now(UTC)
        return _json(200, comment_json(repo, comment))

    def react(repo: Repo, subject: str, subject_id: int, data: dict[str, Any]) -> JSONResponse:
        content = data.get("content")
        if content not in _REACTIONS:
            raise GitHubError(422, "Validation Failed",
                              [{"resource": "Reaction", "field": "content", "code": "invalid"}])
        with fake.lock:
            for existing in fake.reactions:
                if (existing.owner, existing.repo, existing.subject, existing.subject_id,
                        existing.content, existing.user) == (
                        repo.owner, repo.name, subject, subject_id, content, fake.bot_login):
                    return _json(200, objects.reaction(existing.id, user(existing.user),
                                                       content, existing.created_at))
            reaction = Reaction(fake.next_id(), repo.owner, repo.name, subject, subject_id,
                                content, fake.bot_login, datetime.now(UTC))
            fake.reactions.append(reaction)
        return _json(201, objects.reaction(reaction.id, user(reaction.user), content,
                                           reaction.created_at))

    @app.post("/repos/{owner}/{name}/issues/{number}/reactions")
    async def react_issue(owner: str, name: str, number: int, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        if number not in repo.issues:
            raise GitHubError(404, "Not Found")
        return react(repo, "issue", number, data)

    @app.post("/repos/{owner}/{name}/issues/comments/{comment_id}/reactions")
    async def react_comment(owner: str, name: str, comment_id: int,
                            request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        find_comment(repo, comment_id)
        return react(repo, "comment", comment_id, data)

    # -- labels ---------------------------------------------------------------------------

    @app.get("/repos/{owner}/{name}/labels/{label_name}")
    async def get_label(owner: str, name: str, label_name: str,
                        request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        label = repo.labels.get(label_name.lower())
        if label is None:
            raise GitHubError(404, "Not Found")
        return _json(200, label_json(repo, label))

    def create_label_in(repo: Repo, name: str, color: str, description: str | None) -> Label:
        with fake.lock:
            label = Label(fake.next_id(), name, color, description)
            repo.labels[name.lower()] = label
        return label

    @app.post("/repos/{owner}/{name}/labels")
    async def create_label(owner: str, name: str, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        label_name = need_str(data, "name", "Label")
        if label_name.lower() in repo.labels:
            raise GitHubError(422, "Validation Failed",
                              [{"resource": "Label", "field": "name",
                                "code": "already_exists"}])
        color = str(data.get("color") or "ededed")
        if not re.fullmatch(r"[0-9a-fA-F]{6}", color):
            raise GitHubError(422, "Validation Failed",
                              [{"resource": "Label", "field": "color", "code": "invalid"}])
        label = create_label_in(repo, label_name, color, data.get("description"))
        return _json(201, label_json(repo, label))

    @app.post("/repos/{owner}/{name}/issues/{number}/labels")
    async def add_labels(owner: str, name: str, number: int, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await request.json()
        names = data.get("labels", []) if isinstance(data, dict) else data
        # GitHub takes a list of names (or of {"name": ...}); anything else is a 422.
        if not isinstance(names, list):
            raise GitHubError(422, "Invalid request.\n\nFor 'labels', is not an array.")
        names = [n.get("name") if isinstance(n, dict) else n for n in names]
        if not all(isinstance(n, str) and n for n in names):
            raise GitHubError(422, "Invalid request.\n\nFor 'items', is not a string.")
        issue = repo.issues.get(number)
        if issue is None:
            raise GitHubError(404, "Not Found")
        for label_name in names:
            if label_name.lower() not in repo.labels:  # GitHub creates unknown labels
                create_label_in(repo, label_name, "ededed", None)
            if label_name.lower() not in (n.lower() for n in issue.labels):
                issue.labels.append(repo.labels[label_name.lower()].name)
        return _json(200, [label_json(repo, repo.labels[n.lower()]) for n in issue.labels])

    @app.delete("/repos/{owner}/{name}/issues/{number}/labels/{label_name}")
    async def remove_label(owner: str, name: str, number: int, label_name: str,
                           request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        issue = repo.issues.get(number)
        carried = [n for n in issue.labels if n.lower() == label_name.lower()] if issue else []
        if issue is None or not carried:  # GitHub: 404 "Label does not exist"
            raise GitHubError(404, "Label does not exist")
        issue.labels.remove(carried[0])
        return _json(200, [label_json(repo, repo.labels[n.lower()]) for n in issue.labels])

    # -- pull requests --------------------------------------------------------------------

    @app.get("/repos/{owner}/{name}/pulls")
    async def list_pulls(owner: str, name: str, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        state = request.query_params.get("state", "open")
        head = request.query_params.get("head")
        found = [p for p in repo.pulls.values()
                 if state in ("all", p.state) and (head is None or head in (
                     f"{repo.owner}:{p.head}", p.head))]
        return _json(200, [pull_json(repo, p, full=False) for p in found])

    @app.post("/repos/{owner}/{name}/pulls")
    async def create_pull(owner: str, name: str, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        title = need_str(data, "title", "PullRequest")
        head = need_str(data, "head", "PullRequest").removeprefix(f"{owner}:")
        base_ref = need_str(data, "base", "PullRequest")
        body = body_text(data, "PullRequest", required=False)
        for field_name, branch in (("head", head), ("base", base_ref)):
            if fake.branch_sha(owner, name, branch) is None:
                raise GitHubError(422, "Validation Failed",
                                  [{"resource": "PullRequest", "field": field_name,
                                    "code": "invalid"}])
        with fake.lock:
            if any(p.state == "open" and (p.head, p.base) == (head, base_ref)
                   for p in repo.pulls.values()):
                raise GitHubError(422, "Validation Failed", [{
                    "resource": "PullRequest", "code": "custom",
                    "message": f"A pull request already exists for {owner}:{head}."}])
            draft = data.get("draft", False)
            if not isinstance(draft, bool):  # GitHub checks types; "false" is not False
                raise GitHubError(422, "Invalid request.\n\nFor 'properties/draft', "
                                  f"{json.dumps(draft)} is not a boolean.")
            number = repo.next_number()
            pull = Pull(fake.next_id(), number, title, body or "", head,
                        base_ref, draft, fake.bot_login)
            repo.pulls[number] = pull
            repo.issues[number] = _issue_for_pull(fake, pull)
        return _json(201, pull_json(repo, pull))

    def find_pull(repo: Repo, number: int) -> Pull:
        pull = repo.pulls.get(number)
        if pull is None:
            raise GitHubError(404, "Not Found")
        return pull

    @app.get("/repos/{owner}/{name}/pulls/{number}")
    async def get_pull(owner: str, name: str, number: int, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        return _json(200, pull_json(repo, find_pull(repo, number)))

    @app.patch("/repos/{owner}/{name}/pulls/{number}")
    async def update_pull(owner: str, name: str, number: int,
                          request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        pull = find_pull(repo, number)
        pull.title = str(data.get("title", pull.title))
        body = body_text(data, "PullRequest", required=False)
        pull.body = pull.body if body is None else body
        pull.state = str(data.get("state", pull.state))
        pull.updated_at = datetime.now(UTC)
        repo.issues[number].title = pull.title
        return _json(200, pull_json(repo, pull))

    @app.get("/repos/{owner}/{name}/pulls/{number}/reviews/{review_id}/comments")
    async def list_review_comments(owner: str, name: str, number: int, review_id: int,
                                   request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        find_pull(repo, number)
        return _json(200, [review_comment_json(c)
                           for c in fake.review_comments(owner, name, number, review_id)])

    def review_comment_json(c: ReviewComment) -> dict[str, Any]:
        return objects.review_comment(
            fake.api_url, f"{c.owner}/{c.repo}", comment_id=c.id, pull_number=c.pull_number,
            review_id=c.review_id, body=c.body, author=user(c.user), path=c.path, line=c.line,
            diff_hunk=c.diff_hunk, commit_id=c.commit_id, created=c.created_at,
            in_reply_to=c.in_reply_to)

    @app.get("/repos/{owner}/{name}/pulls/{number}/comments")
    async def list_pull_review_comments(owner: str, name: str, number: int,
                                        request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        find_pull(repo, number)
        return _json(200, [review_comment_json(c)
                           for c in fake.pull_review_comments(owner, name, number)])

    @app.post("/repos/{owner}/{name}/pulls/{number}/comments/{comment_id}/replies")
    async def reply_to_review_comment(owner: str, name: str, number: int, comment_id: int,
                                      request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        find_pull(repo, number)
        text = body_text(await json_body(request), "PullRequestReviewComment",
                         required=True) or ""
        try:
            reply = fake.reply_to_review_comment(owner, name, number, comment_id,
                                                 fake.bot_login, text)
        except KeyError:
            raise GitHubError(404, "Not Found") from None
        return _json(201, review_comment_json(reply))

    @app.post("/repos/{owner}/{name}/pulls/{number}/requested_reviewers")
    async def request_reviewers(owner: str, name: str, number: int,
                                request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        pull = find_pull(repo, number)
        for login in data.get("reviewers", []):
            if login == pull.user:
                raise GitHubError(422, "Review cannot be requested from pull request author.")
            if repo.roles.get(login, "none") == "none" and login != repo.owner:
                raise GitHubError(422, "Reviews may only be requested from collaborators. "
                                  "One or more of the users or teams you specified is not a "
                                  "collaborator of the repository.")
            if login not in pull.requested_reviewers:
                pull.requested_reviewers.append(login)
        return _json(201, pull_json(repo, pull, full=False))

    add_git_data_routes(app, fake, repo_of, json_body)
    register_check_routes(app, fake, repo_of, user, GitHubError)
    return app


def _tree_entry(repo: Repo, ref: str, path: str) -> tuple[str, str, str] | None:
    """`(mode, type, sha)` of `path` at `ref`, or None where there is nothing."""
    if not path.strip("/"):
        return None
    listing = subprocess.run(["git", "ls-tree", "-z", ref, "--", path.strip("/")],
                             cwd=repo.bare_path, capture_output=True, text=True,
                             check=False).stdout
    for line in filter(None, listing.split("\0")):
        meta, _, entry_path = line.partition("\t")
        if entry_path == path.strip("/"):
            mode, kind, sha = meta.split()
            return mode, kind, sha
    return None


def _ls_tree(repo: Repo, spec: str) -> list[tuple[str, str, int, str]]:
    """`(type, sha, size, name)` of each entry of tree `spec` (size 0 if none)."""
    listing = subprocess.run(["git", "ls-tree", "-l", "-z", spec], cwd=repo.bare_path,
                             capture_output=True, text=True, check=True).stdout
    entries = []
    for line in filter(None, listing.split("\0")):
        meta, _, entry_name = line.partition("\t")
        _mode, kind, sha, size = meta.split()
        entries.append((kind, sha, int(size) if size.isdigit() else 0, entry_name))
    return entries


def _issue_for_pull(fake: FakeGitHub, pull: Pull) -> Issue:
    """Every PR is also an issue on GitHub: that twin carries its labels and comments."""
    return Issue(id=fake.next_id(), number=pull.number, title=pull.title, body=pull.body,
                 user=pull.user)
