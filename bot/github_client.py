"""`GitHubApi` implemented with githubkit, authenticated as a GitHub App.

The only module of the project that imports githubkit. Every call runs through
`_call`, which retries transient failures (5xx, connection errors, secondary
rate limits) with a capped wait (solver/retry.py) and turns everything else into a `GitHubError`
subclass that names the cause (`NotFound`, `Forbidden`, `RateLimited`, ...).
Messages name the method, the route and the status; they never carry a token.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import logging
import ssl
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, cast, get_args
from urllib.parse import quote, urlsplit

import httpx
from githubkit import AppAuthStrategy, AppInstallationAuthStrategy, GitHub
from githubkit.cache import MemCacheStrategy
from githubkit.exception import (
    GitHubException,
    PrimaryRateLimitExceeded,
    RateLimitExceeded,
    RequestError,
    RequestFailed,
)

from bot.git_data import (
    NOT_FAST_FORWARD,
    REF_EXISTS,
    CreatedCommit,
    TreeChange,
    blob_payload,
    commit_payload,
    created_commit,
    ref_refusal,
    tree_payload,
)
from bot.github_api import (
    AlreadyExists,
    CheckRunInfo,
    CommentInfo,
    CommitInfo,
    GitHubError,
    IssueInfo,
    NotAFile,
    NotFastForward,
    NotFound,
    Permission,
    PullInfo,
    RateLimited,
    RepoRef,
    ReviewCommentInfo,
    ReviewInfo,
    ServerError,
    ValidationFailed,
    error_for,
)
from bot.markdown import fit_body
from bot.settings import BotSettings
from solver.retry import Backoff, Transient, with_backoff

if TYPE_CHECKING:
    from githubkit_schemas.v2022_11_28.rest import RestNamespace

log = logging.getLogger(__name__)
T = TypeVar("T")

ReactionContent = Literal["+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"]
_CLOCK_SKEW_SECONDS = 5
_BOT_LOGIN_TTL_S = 600.0
_KIND_WORDS = {"dir": "directory", "submodule": "submodule", "symlink": "symbolic link"}
_PERMISSIONS: tuple[Permission, ...] = ("admin", "maintain", "write", "triage", "read", "none")
# The REST API version the bot speaks, not githubkit's latest (2026-03-10): 2022-11-28 is
# what every GitHub still serves (github.com, GHEC, Enterprise Server) and the version of
# the OpenAPI description the tests check each request against (the fake GitHub answers a
# 400 to any other X-GitHub-Api-Version). Its models come from githubkit-schemas[2022-11-28].
REST_API_VERSION: Final = "2022-11-28"


def _rest(gh: GitHub[Any]) -> RestNamespace:
    """githubkit's REST endpoints at `REST_API_VERSION` (each sends it in its header)."""
    return gh.rest(REST_API_VERSION)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every client: githubkit opens an httpx client per request, and
    each would otherwise load the CA bundle again (measured: 20 ms, most of a request)."""
    return ssl.create_default_context()


def clone_host_url(api_url: str) -> str:
    """The git host that goes with a REST API URL, as `scheme://host`.

    api.github.com -> https://github.com; GitHub Enterprise `https://HOST/api/v3`
    -> https://HOST; any other URL (the local fake in tests) -> its own scheme
    and host, because that server also speaks git smart HTTP.
    """
    parts = urlsplit(api_url)
    if parts.hostname == "api.github.com":
        return "https://github.com"
    return f"{parts.scheme}://{parts.netloc}"


class GitHubAppClient:
    """The bot's GitHub verbs, for one App, against github.com, GHES or a fake."""

    def __init__(self, app_id: int, private_key: str, api_url: str = "https://api.github.com",
                 *, max_tries: int = 4, backoff_seconds: float = 1.0,
                 max_retry_wait_seconds: float = 60.0, timeout_seconds: float = 30.0) -> None:
        self._app_id = app_id
        self._private_key = private_key
        self._api_url = api_url.rstrip("/")
        # Transient failures (5xx, connection errors, rate limits that lift soon) are
        # tried again; GitHub's Retry-After is followed up to the cap.
        self._retry = Backoff(tries=max(1, max_tries), first_wait=backoff_seconds,
                              max_wait=max_retry_wait_seconds, retry_on=(Transient,))
        self._timeout_seconds = timeout_seconds
        # Our own retry loop decides about retries (capped waits, typed errors);
        # the HTTP cache is off because the bot must always re-read the truth.
        # githubkit's default token cache is one per process, keyed by App id alone:
        # a cache of our own keeps JWTs and installation tokens to this key and host.
        self._app = GitHub(AppAuthStrategy(str(app_id), private_key), base_url=self._api_url,
                           auto_retry=False, http_cache=False, timeout=timeout_seconds,
                           cache_strategy=MemCacheStrategy(), ssl_verify=_tls_context())
        self._installations: dict[int, GitHub[Any]] = {}
        self._bot_login: tuple[str, float] | None = None  # (login, when it was asked)

    @classmethod
    def from_settings(cls, settings: BotSettings) -> GitHubAppClient:
        private_key = settings.private_key()
        if settings.github_app_id is None or not private_key:
            raise GitHubError("set GITHUB_APP_ID and GITHUB_PRIVATE_KEY (or _PATH)")
        return cls(settings.github_app_id, private_key, settings.github_api_url)

    # -- plumbing -----------------------------------------------------------------------

    def _client(self, repo: RepoRef | None) -> GitHub[Any]:
        """The App itself (JWT) for None, else the installation that can see `repo`."""
        if repo is None:
            return self._app
        gh = self._installations.get(repo.installation_id)
        if gh is None:
            # Its own cache: the minted token lives in this object's memory only, and
            # forgetting the object (after a 401) forgets the token too.
            gh = GitHub(AppInstallationAuthStrategy(str(self._app_id), self._private_key,
                                                    repo.installation_id),
                        base_url=self._api_url, auto_retry=False, http_cache=False,
                        timeout=self._timeout_seconds, cache_strategy=MemCacheStrategy(),
                        ssl_verify=_tls_context())
            self._installations[repo.installation_id] = gh
        return gh

    def _call(self, repo: RepoRef | None, what: str, request: Callable[[GitHub[Any]], T],
              ok_statuses: tuple[int, ...] = (),
              already_done: Callable[[GitHub[Any]], T | None] | None = None,
              policy: Backoff | None = None) -> T | None:
        """Run `request` with retries (solver/retry.py, this client's `Backoff`); None
        when it failed with one of `ok_statuses`.

        A request that is not idempotent passes `already_done`: after a failure that may
        have happened after GitHub acted (a 5xx, a dropped connection), it looks for the
        result before trying again, so a retry never creates a second comment or PR.
        `policy` replaces the client's own (the ref writes: one try, the caller retries).
        """
        retry = policy or self._retry
        ambiguous = refreshed = False

        def try_once(number: int) -> T | None:
            nonlocal ambiguous, refreshed
            if ambiguous and already_done is not None:
                found = already_done(self._client(repo))
                if found is not None:
                    log.info("%s: it had succeeded before the failure", what)
                    return found
            ambiguous = False
            try:
                return request(self._client(repo))
            except RequestFailed as exc:
                status = exc.response.status_code
                if not isinstance(exc, RateLimitExceeded):
                    if status in ok_statuses:
                        return None
                    if status == 401 and repo is not None and not refreshed:
                        # A revoked or expired installation token: mint a new one, once
                        # (not counted as a try).
                        self._installations.pop(repo.installation_id, None)
                        refreshed = True
                        return try_once(number)
                failure = _failure(what, exc, retry.max_wait)
            except GitHubException as exc:
                failure = _failure(what, exc, retry.max_wait)
            ambiguous = isinstance(failure, _MayHaveActed)
            raise failure from None

        try:
            return with_backoff(try_once, retry, what=what)
        except Transient as last:
            message = f"{what}: gave up after {retry.tries} tries: {last.reason}"
            if last.wait is not None:  # rate limited: say when it lifts
                lifts_at = datetime.now(UTC) + timedelta(seconds=last.wait)
                raise RateLimited(message, last.status, retry_after_s=last.wait,
                                  reset_at=lifts_at) from None
            raise ServerError(message, last.status) from None

    def _must(self, repo: RepoRef | None, what: str,
              request: Callable[[GitHub[Any]], T]) -> T:
        result = self._call(repo, what, request)
        assert result is not None  # no ok_statuses given, so failures raised
        return result

    # -- identity and repository ----------------------------------------------------------

    def installation_token(self, repo: RepoRef) -> str:
        response = self._must(
            None, f"mint installation token for {repo.full_name}",
            lambda gh: _rest(gh).apps.create_installation_access_token(repo.installation_id))
        return response.parsed_data.token

    def clone_url(self, repo: RepoRef) -> str:
        return f"{clone_host_url(self._api_url)}/{repo.owner}/{repo.name}.git"

    def bot_login(self) -> str:
        # Asked on every accepted delivery (to find the status comment); the slug changes
        # only when the App is renamed, so one answer serves for a while.
        now = time.monotonic()
        if self._bot_login is not None and now - self._bot_login[1] < _BOT_LOGIN_TTL_S:
            return self._bot_login[0]
        response = self._must(None, "GET /app", lambda gh: _rest(gh).apps.get_authenticated())
        app = response.parsed_data
        if app is None or not app.slug:
            raise GitHubError("GET /app: the App has no slug")
        self._bot_login = (f"{app.slug}[bot]", now)
        return self._bot_login[0]

    def default_branch(self, repo: RepoRef) -> str:
        response = self._must(repo, f"GET repo {repo.full_name}",
                              lambda gh: _rest(gh).repos.get(repo.owner, repo.name))
        return response.parsed_data.default_branch

    def read_file(self, repo: RepoRef, path: str, ref: str) -> str | None:
        response = self._call(repo, f"GET {repo.full_name}:{path}@{ref}",
                              lambda gh: _rest(gh).repos.get_content(repo.owner, repo.name, path,
                                                                   ref=ref),
                              ok_statuses=(404,))
        if response is None:
            return None
        content = response.parsed_data
        kind = "dir" if isinstance(content, list) else content.type
        if isinstance(content, list) or content.type != "file":
            # Something is there, but no file: saying "absent" would quietly run on the
            # defaults where the maintainer meant a configuration.
            raise NotAFile(f"`{path}` on `{ref}` is a {_KIND_WORDS.get(kind, kind)}, "
                           "not a file", path=path, kind=kind)
        return base64.b64decode(content.content).decode("utf-8", errors="replace")

    def permission(self, repo: RepoRef, username: str) -> Permission:
        response = self._call(
            repo, f"GET permission of {username} on {repo.full_name}",
            lambda gh: _rest(gh).repos.get_collaborator_permission_level(repo.owner, repo.name,
                                                                    username),
            ok_statuses=(404,))
        if response is None:
            return "none"
        data = response.parsed_data
        # `permission` only knows admin/write/read/none; `role_name` also says maintain
        # and triage (or a custom role's name, where `permission` is the safe answer).
        for candidate in (data.role_name, data.permission):
            if candidate in _PERMISSIONS:
                return candidate
        return "none"

    # -- issues and comments ------------------------------------------------------------

    def issue(self, repo: RepoRef, number: int) -> IssueInfo:
        data = self._must(repo, f"GET issue {repo.full_name}#{number}",
                          lambda gh: _rest(gh).issues.get(repo.owner, repo.name, number)
                          ).parsed_data
        return IssueInfo(number=data.number, title=data.title, body=data.body or "",
                         state=data.state, author=data.user.login if data.user else "",
                         is_pull_request=bool(data.pull_request))

    def comments(self, repo: RepoRef, number: int) -> list[CommentInfo]:

        def fetch_all(gh: GitHub[Any]) -> list[CommentInfo]:
            pages: Iterator[Any] = gh.rest.paginate(
                _rest(gh).issues.list_comments, owner=repo.owner, repo=repo.name,
                issue_number=number, per_page=100)
            return [CommentInfo(id=c.id, author=c.user.login if c.user else "",
                                body=c.body or "") for c in pages]

        return self._must(repo, f"GET comments of {repo.full_name}#{number}", fetch_all)

    def comment(self, repo: RepoRef, number: int, body: str) -> int:
        body = fit_body(body)  # as it is posted: what `posted_already` compares
        # GitHub stamps comments to the second; the margin covers clock skew.
        since = (datetime.now(UTC) - timedelta(seconds=_CLOCK_SKEW_SECONDS)
                 ).strftime("%Y-%m-%dT%H:%M:%SZ")

        def posted_already(gh: GitHub[Any]) -> int | None:
            bot = self.bot_login()
            # githubkit types `since` as a datetime; GitHub's own format is the string.
            pages: Iterator[Any] = gh.rest.paginate(  # type: ignore[call-overload]
                _rest(gh).issues.list_comments, owner=repo.owner, repo=repo.name,
                issue_number=number, since=since, per_page=100)
            for c in pages:
                if c.body == body and c.user is not None and c.user.login == bot:
                    return c.id
            return None

        comment_id = self._call(
            repo, f"POST comment on {repo.full_name}#{number}",
            lambda gh: _rest(gh).issues.create_comment(repo.owner, repo.name, number,
                                                     body=body).parsed_data.id,
            already_done=posted_already)
        assert comment_id is not None
        return comment_id

    def edit_comment(self, repo: RepoRef, comment_id: int, body: str) -> None:
        body = fit_body(body)
        self._must(repo, f"PATCH comment {comment_id} on {repo.full_name}",
                   lambda gh: _rest(gh).issues.update_comment(repo.owner, repo.name, comment_id,
                                                         body=body))

    def react(self, repo: RepoRef, content: str, *, issue_number: int | None = None,
              comment_id: int | None = None) -> None:
        if (issue_number is None) == (comment_id is None):
            raise ValueError("react to exactly one of issue_number or comment_id")
        if content not in get_args(ReactionContent):
            raise ValueError(f"GitHub has no reaction {content!r}")
        reaction = cast(ReactionContent, content)
        if comment_id is not None:
            self._must(repo, f"POST reaction on comment {comment_id} of {repo.full_name}",
                       lambda gh: _rest(gh).reactions.create_for_issue_comment(
                           repo.owner, repo.name, comment_id, content=reaction))
        else:
            assert issue_number is not None
            self._must(repo, f"POST reaction on {repo.full_name}#{issue_number}",
                       lambda gh: _rest(gh).reactions.create_for_issue(
                           repo.owner, repo.name, issue_number, content=reaction))

    # -- labels ---------------------------------------------------------------------------

    def ensure_label(self, repo: RepoRef, name: str, color: str, description: str) -> None:
        existing = self._call(repo, f"GET label {name!r} of {repo.full_name}",
                              lambda gh: _rest(gh).issues.get_label(repo.owner, repo.name, name),
                              ok_statuses=(404,))
        if existing is not None:
            return
        # Someone (maybe a concurrent run) may create it between our GET and POST.
        with contextlib.suppress(AlreadyExists):
            self._must(repo, f"POST label {name!r} on {repo.full_name}",
                       lambda gh: _rest(gh).issues.create_label(
                           repo.owner, repo.name, name=name, color=color.lstrip("#"),
                           description=description))

    def add_labels(self, repo: RepoRef, number: int, labels: list[str]) -> None:
        self._must(repo, f"POST labels on {repo.full_name}#{number}",
                   lambda gh: _rest(gh).issues.add_labels(repo.owner, repo.name, number,
                                                     data={"labels": labels}))

    def remove_label(self, repo: RepoRef, number: int, label: str) -> None:
        # GitHub answers 404 when the issue does not carry the label: nothing to do.
        self._call(repo, f"DELETE label {label!r} on {repo.full_name}#{number}",
                   lambda gh: _rest(gh).issues.remove_label(repo.owner, repo.name, number,
                                                            label),
                   ok_statuses=(404,))

    # -- pull requests --------------------------------------------------------------------

    def find_open_pull(self, repo: RepoRef, head_branch: str) -> PullInfo | None:
        response = self._must(
            repo, f"GET pulls of {repo.full_name} with head {head_branch}",
            lambda gh: _rest(gh).pulls.list(repo.owner, repo.name,
                                       head=f"{repo.owner}:{head_branch}", state="open"))
        pulls = response.parsed_data
        return _pull_info(pulls[0]) if pulls else None

    def open_draft_pull(self, repo: RepoRef, *, title: str, body: str, head: str,
                        base: str) -> PullInfo:
        body = fit_body(body)

        def opened_already(gh: GitHub[Any]) -> PullInfo | None:
            found = self.find_open_pull(repo, head)
            return found if found is not None and found.draft else None

        pull = self._call(
            repo, f"POST draft pull {head} -> {base} on {repo.full_name}",
            lambda gh: _pull_info(_rest(gh).pulls.create(repo.owner, repo.name, title=title,
                                                       body=body, head=head, base=base,
                                                       draft=True).parsed_data),
            already_done=opened_already)
        assert pull is not None
        return pull

    def update_pull(self, repo: RepoRef, number: int, *, title: str, body: str) -> PullInfo:
        body = fit_body(body)
        response = self._must(
            repo, f"PATCH pull {repo.full_name}#{number}",
            lambda gh: _rest(gh).pulls.update(repo.owner, repo.name, number, title=title,
                                         body=body))
        return _pull_info(response.parsed_data)

    def review_comments(self, repo: RepoRef, number: int, review_id: int
                        ) -> list[ReviewCommentInfo]:
        def fetch_all(gh: GitHub[Any]) -> list[ReviewCommentInfo]:
            pages: Iterator[Any] = gh.rest.paginate(
                _rest(gh).pulls.list_comments_for_review, owner=repo.owner, repo=repo.name,
                pull_number=number, review_id=review_id, per_page=100)
            return [_review_comment_info(c) for c in pages]

        return self._must(repo, f"GET comments of review {review_id} on {repo.full_name}"
                          f"#{number}", fetch_all)

    def reply_to_review_comment(self, repo: RepoRef, number: int, comment_id: int,
                                body: str) -> int:
        body = fit_body(body)

        def posted_already(gh: GitHub[Any]) -> int | None:
            bot = self.bot_login()
            pages: Iterator[Any] = gh.rest.paginate(
                _rest(gh).pulls.list_review_comments, owner=repo.owner, repo=repo.name,
                pull_number=number, per_page=100)
            for c in pages:
                if (c.in_reply_to_id == comment_id and c.body == body and c.user is not None
                        and c.user.login == bot):
                    return c.id
            return None

        reply_id = self._call(
            repo, f"POST reply to review comment {comment_id} on {repo.full_name}#{number}",
            lambda gh: _rest(gh).pulls.create_reply_for_review_comment(
                repo.owner, repo.name, number, comment_id, body=body).parsed_data.id,
            already_done=posted_already)
        assert reply_id is not None
        return reply_id

    # -- checks and CI logs (issue 23 §2: the PR repairs its own CI) ------------------

    def check_runs(self, repo: RepoRef, ref: str) -> list[CheckRunInfo]:
        # The JSON, not githubkit's model: its conclusion enum lacks `startup_failure`.
        response = self._must(
            repo, f"GET check runs of {repo.full_name}@{ref[:12]}",
            lambda gh: _rest(gh).checks.list_for_ref(repo.owner, repo.name, ref,
                                                     filter_="latest", per_page=100))
        payload: Any = response.json()
        runs = payload.get("check_runs", []) if isinstance(payload, dict) else []
        return [_check_run_info(run) for run in runs if isinstance(run, dict)]

    def job_log(self, repo: RepoRef, job_id: int, max_bytes: int) -> str | None:
        """GitHub answers the logs route with a 302 to a short-lived download URL; the
        download is read as a stream and only its last `max_bytes` are kept."""
        url = f"{self._api_url}/repos/{repo.owner}/{repo.name}/actions/jobs/{job_id}/logs"
        what = f"GET log of job {job_id} on {repo.full_name}"
        headers = {"Authorization": f"Bearer {self.installation_token(repo)}",
                   "Accept": "application/vnd.github+json",
                   "X-GitHub-Api-Version": REST_API_VERSION}
        try:
            with httpx.Client(timeout=self._timeout_seconds, verify=_tls_context()) as http:
                answer = http.get(url, headers=headers, follow_redirects=False)
                if answer.status_code in (404, 410):
                    return None
                location = answer.headers.get("location")
                if answer.status_code != 302 or not location:
                    raise error_for(f"{what}: GitHub answered {answer.status_code}",
                                    answer.status_code, accepted_permissions=answer.headers.get(
                                        "x-accepted-github-permissions", ""))
                # The signed URL is the credential: no token goes to the log's host.
                with http.stream("GET", location, follow_redirects=True) as download:
                    if download.status_code >= 400:
                        return None
                    return _stream_tail(download.iter_bytes(), max_bytes)
        except httpx.HTTPError as exc:
            raise ServerError(f"{what}: {type(exc).__name__}") from None

    def reviews(self, repo: RepoRef, number: int) -> list[ReviewInfo]:
        def fetch_all(gh: GitHub[Any]) -> list[ReviewInfo]:
            pages: Iterator[Any] = gh.rest.paginate(
                _rest(gh).pulls.list_reviews, owner=repo.owner, repo=repo.name,
                pull_number=number, per_page=100)
            return [ReviewInfo(author=r.user.login if r.user else "",
                               commit_id=r.commit_id or "", state=str(r.state).lower())
                    for r in pages]

        return self._must(repo, f"GET reviews of {repo.full_name}#{number}", fetch_all)

    def commit(self, repo: RepoRef, ref: str) -> CommitInfo:
        data: Any = self._must(repo, f"GET commit {repo.full_name}@{ref[:12]}",
                               lambda gh: _rest(gh).repos.get_commit(
                                   repo.owner, repo.name, ref, per_page=1)).json()
        person = data.get("commit", {}) if isinstance(data, dict) else {}
        return CommitInfo(sha=str(data.get("sha", ref)),
                          author_email=str((person.get("author") or {}).get("email", "")),
                          committer_email=str((person.get("committer") or {}).get("email", "")))

    def request_review(self, repo: RepoRef, number: int, reviewers: list[str]) -> None:
        if not reviewers:
            return
        try:
            self._must(repo, f"POST review request on {repo.full_name}#{number}",
                       lambda gh: _rest(gh).pulls.request_reviewers(repo.owner, repo.name, number,
                                                               reviewers=reviewers))
        except ValidationFailed as exc:
            # GitHub refuses to ask a PR's author to review it; where the trigger is
            # also the author there is nobody else to ask, and that is not a failure.
            # That 422 carries no error code, so GitHub's own message is all there is.
            if "pull request author" in exc.github_message.lower():
                log.info("review request on %s#%d skipped: %s", repo.full_name, number, exc)
                return
            raise

    # -- the Git Data API: commits GitHub signs (bot/git_data.py) -------------------------

    def create_blob(self, repo: RepoRef, content: bytes) -> str:
        # Idempotent by content (a blob's sha is its bytes'), so the client's retries
        # are safe.
        encoded = base64.b64encode(content).decode("ascii")
        response = self._must(repo, f"POST blob ({len(content)} bytes) on {repo.full_name}",
                              lambda gh: _rest(gh).git.create_blob(
                                  repo.owner, repo.name, data=cast(Any, blob_payload(encoded))))
        return str(response.parsed_data.sha)

    def create_tree(self, repo: RepoRef, base_tree: str, changes: list[TreeChange]) -> str:
        payload = tree_payload(base_tree, changes)  # `data`: a deletion's sha is sent null
        response = self._must(repo, f"POST tree ({len(changes)} paths) on {repo.full_name}",
                              lambda gh: _rest(gh).git.create_tree(repo.owner, repo.name,
                                                                   data=cast(Any, payload)))
        return str(response.parsed_data.sha)

    def create_commit(self, repo: RepoRef, *, message: str, tree: str,
                      parents: list[str]) -> CreatedCommit:
        # A retry after a lost answer makes a second commit object (another timestamp);
        # only the one a ref is then set to is ever seen, the other is never reachable.
        response = self._must(repo, f"POST commit of tree {tree[:12]} on {repo.full_name}",
                              lambda gh: _rest(gh).git.create_commit(
                                  repo.owner, repo.name,
                                  data=cast(Any, commit_payload(message, tree, parents))))
        return created_commit(cast(dict[str, Any], response.json()))

    def branch_head(self, repo: RepoRef, branch: str) -> str | None:
        response = self._call(repo, f"GET ref heads/{branch} of {repo.full_name}",
                              lambda gh: _rest(gh).git.get_ref(repo.owner, repo.name,
                                                               f"heads/{branch}"),
                              ok_statuses=(404,))
        return None if response is None else str(response.parsed_data.object_.sha)

    def create_branch(self, repo: RepoRef, branch: str, sha: str) -> None:
        try:
            self._must_once(repo, f"POST ref heads/{branch} on {repo.full_name}",
                            lambda gh: _rest(gh).git.create_ref(
                                repo.owner, repo.name, ref=f"refs/heads/{branch}", sha=sha))
        except ValidationFailed as exc:
            if ref_refusal(exc.github_message) == REF_EXISTS:
                raise AlreadyExists(str(exc), exc.status, github_message=exc.github_message,
                                    codes=exc.codes) from None
            raise

    def move_branch(self, repo: RepoRef, branch: str, sha: str, *, force: bool) -> None:
        try:
            self._must_once(repo, f"PATCH ref heads/{branch} on {repo.full_name}",
                            lambda gh: _rest(gh).git.update_ref(
                                repo.owner, repo.name, f"heads/{branch}", sha=sha,
                                force=force))
        except ValidationFailed as exc:
            if ref_refusal(exc.github_message) == NOT_FAST_FORWARD:
                raise NotFastForward(str(exc), exc.status, github_message=exc.github_message,
                                     codes=exc.codes) from None
            if "reference does not exist" in exc.github_message.casefold():
                raise NotFound(str(exc), exc.status,
                               github_message=exc.github_message) from None
            raise

    def _must_once(self, repo: RepoRef, what: str, request: Callable[[GitHub[Any]], T]) -> T:
        """One try (a 401 still mints a fresh token): a ref write's caller asks whether
        the run is still current before each, and whether a lost one had landed."""
        once = dataclasses.replace(self._retry, tries=1)
        result = self._call(repo, what, request, policy=once)
        assert result is not None
        return result


class _MayHaveActed(Transient):
    """A failure after which GitHub may have done what was asked (a 5xx, a dropped
    connection): the next try first looks for the result (`already_done`)."""


def _failure(what: str, exc: GitHubException, max_wait: float) -> Exception:
    """What a failed request means: a `Transient` worth another try, or the typed
    `GitHubError` to raise now."""
    if isinstance(exc, RateLimitExceeded):
        status = exc.response.status_code
        retry_after = exc.retry_after.total_seconds()
        if isinstance(exc, PrimaryRateLimitExceeded) and retry_after > max_wait:
            # The hour's quota is spent and resets later than we may wait: capped
            # retries would fail the same way, so say when it lifts instead.
            reset_at = datetime.now(UTC) + timedelta(seconds=retry_after)
            return RateLimited(f"{what}: GitHub's rate limit is exhausted until "
                               f"{reset_at:%H:%M:%S} UTC ({retry_after:.0f}s from now)",
                               status, retry_after_s=retry_after, reset_at=reset_at)
        return Transient(f"rate limited ({status})", wait=retry_after, status=status)
    if isinstance(exc, RequestFailed):
        status = exc.response.status_code
        if status >= 500:
            return _MayHaveActed(f"server error ({status})", status=status)
        github_message, codes = _error_details(exc)
        return error_for(f"{what}: GitHub answered {status}: {_error_message(exc)}", status,
                         github_message=github_message, codes=codes,
                         accepted_permissions=exc.response.headers.get(
                             "x-accepted-github-permissions", ""))
    if isinstance(exc, RequestError):
        return _MayHaveActed(f"connection error ({type(exc.exc).__name__})")
    return GitHubError(f"{what}: {type(exc).__name__}")  # e.g. a malformed private key


def _review_comment_info(comment: Any) -> ReviewCommentInfo:
    return ReviewCommentInfo(id=comment.id, author=comment.user.login if comment.user else "",
                             body=comment.body or "", path=comment.path,
                             line=comment.line or None, diff_hunk=comment.diff_hunk or "")


def _pull_info(pull: Any) -> PullInfo:
    """From githubkit's PullRequest or PullRequestSimple (same fields for these)."""
    return PullInfo(number=pull.number, url=pull.html_url, head=pull.head.ref,
                    state=pull.state, draft=bool(pull.draft), head_sha=pull.head.sha)


def _check_run_info(run: dict[str, Any]) -> CheckRunInfo:
    output = run.get("output") or {}
    app = run.get("app") or {}
    return CheckRunInfo(id=int(run["id"]), name=str(run.get("name", "")),
                        status=str(run.get("status", "")), conclusion=run.get("conclusion"),
                        app_slug=str(app.get("slug") or ""),
                        title=str(output.get("title") or ""),
                        summary=str(output.get("summary") or ""),
                        text=str(output.get("text") or ""))


def _stream_tail(chunks: Iterator[bytes], max_bytes: int) -> str:
    """The last `max_bytes` of a stream, holding at most twice that at a time."""
    kept = bytearray()
    for chunk in chunks:
        kept += chunk
        if len(kept) > 2 * max_bytes:
            del kept[:-max_bytes]
    return bytes(kept[-max_bytes:]).decode("utf-8", errors="replace")


def _error_details(exc: RequestFailed) -> tuple[str, tuple[str, ...]]:
    """GitHub's `message` and its `errors[].code` values, for the typed errors."""
    try:
        payload = exc.response.json()
    except ValueError:
        return exc.response.text[:200], ()
    if not isinstance(payload, dict):
        return "", ()
    errors = payload.get("errors")
    codes = tuple(str(e["code"]) for e in errors if isinstance(e, dict) and "code" in e
                  ) if isinstance(errors, list) else ()
    return str(payload.get("message", ""))[:500], codes


def _error_message(exc: RequestFailed) -> str:
    """GitHub's own `message` (and error codes), short; never request headers."""
    try:
        payload = exc.response.json()
    except ValueError:
        return exc.response.text[:200]
    if not isinstance(payload, dict):
        return str(payload)[:200]
    message = str(payload.get("message", ""))
    errors = payload.get("errors")
    if isinstance(errors, list) and errors:
        details = [e.get("message") or e.get("code") if isinstance(e, dict) else str(e)
                   for e in errors]
        message += f" ({', '.join(str(d) for d in details)})"
    return message[:500]


async def convert_manifest_code(api_url: str, code: str, *,
                                timeout_seconds: float = 15.0) -> dict[str, Any]:
    """POST /app-manifests/{code}/conversions through githubkit, unauthenticated (the
    one-time code is the credential): the new App's id, slug, pem, webhook_secret, ...

    Raises the typed `GitHubError`s; 5xx and connection errors are not retried, because
    the code works once and GitHub may have used it before the failure.
    """
    what = "POST /app-manifests/{code}/conversions"
    # githubkit puts the code into the path as given: quote it, it comes from a URL.
    async with GitHub(base_url=api_url.rstrip("/"), auto_retry=False, http_cache=False,
                      timeout=timeout_seconds, ssl_verify=_tls_context()) as gh:
        try:
            response = await _rest(gh).apps.async_create_from_manifest(quote(code, safe=""))
        except RequestFailed as exc:
            status = exc.response.status_code
            github_message, codes = _error_details(exc)
            raise error_for(f"{what}: GitHub answered {status}: {_error_message(exc)}", status,
                            github_message=github_message, codes=codes) from None
        except RequestError as exc:
            raise ServerError(f"{what}: could not reach GitHub "
                              f"({type(exc.exc).__name__})") from None
        except GitHubException as exc:
            raise GitHubError(f"{what}: {type(exc).__name__}") from None
    try:
        return cast(dict[str, Any], response.json())
    except ValueError:
        raise GitHubError(f"{what}: GitHub's answer is not JSON") from None
