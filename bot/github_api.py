"""The handful of GitHub verbs the bot needs; nothing else in the project sees githubkit.

`bot/github_client.py` implements this protocol with githubkit; tests run it
against the local fake GitHub under `tests/support/fake_github/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from bot.git_data import CreatedCommit, TreeChange

Permission = Literal["admin", "maintain", "write", "triage", "read", "none"]
WRITE_PERMISSIONS: tuple[Permission, ...] = ("admin", "maintain", "write")


class GitHubError(RuntimeError):
    """GitHub answered with an error the caller should report (status and message kept).

    The subclasses below say why, so that callers match on a type, not on message text
    (as gidgethub does); every one is still a `GitHubError` for handlers that do not care.
    `github_message` is GitHub's own `message`, `codes` the `errors[].code` values.
    """

    def __init__(self, message: str, status: int | None = None, *,
                 github_message: str = "", codes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.github_message = github_message
        self.codes = codes


class Unauthorized(GitHubError):
    """401: the App's key or token was refused (after one fresh token)."""


class Forbidden(GitHubError):
    """403 without a rate limit: e.g. "Resource not accessible by integration" (a
    permission the App was not granted, or a repository it is not installed on).

    `accepted_permissions` is GitHub's `X-Accepted-GitHub-Permissions` header: the
    permission sets that would have allowed the request, e.g. "issues=write" or
    "contents=read; contents=write" (sets split by ";", the parts of a set by ",");
    empty where GitHub did not say."""

    def __init__(self, message: str, status: int | None = None, *,
                 github_message: str = "", codes: tuple[str, ...] = (),
                 accepted_permissions: str = "") -> None:
        super().__init__(message, status, github_message=github_message, codes=codes)
        self.accepted_permissions = accepted_permissions

    @property
    def missing_permission(self) -> str:
        """The first permission set that would do, as "issues: write" (README's words)."""
        first = self.accepted_permissions.split(";")[0].strip()
        return ", ".join(part.replace("=", ": ").replace("_", " ")
                         for part in first.split(",") if part.strip())


class RateLimited(GitHubError):
    """A primary or secondary rate limit that did not lift within the wait we allow.

    `retry_after_s` is how long GitHub asked us to wait (None where it did not say);
    `reset_at` when that wait ends (UTC), for a message saying when to retry."""

    def __init__(self, message: str, status: int | None = None, *,
                 github_message: str = "", codes: tuple[str, ...] = (),
                 retry_after_s: float | None = None, reset_at: datetime | None = None
                 ) -> None:
        super().__init__(message, status, github_message=github_message, codes=codes)
        self.retry_after_s = retry_after_s
        self.reset_at = reset_at


class NotFound(GitHubError):
    """404: the thing does not exist, or the App cannot see it."""


class ValidationFailed(GitHubError):
    """422: GitHub refused the request's content; `codes` says which rule."""


class AlreadyExists(ValidationFailed):
    """422 with the error code `already_exists` (a label, a pull for that head...)."""


class NotFastForward(ValidationFailed):
    """422 to a ref update without force: the branch is not an ancestor of the commit
    (someone pushed to it meanwhile)."""


class NotAFile(GitHubError):
    """`read_file` found a directory, a submodule or a symlink at the path, not a file
    (GitHub answers 200 with a listing or another type, so this is no HTTP error)."""

    def __init__(self, message: str, *, path: str, kind: str) -> None:
        super().__init__(message, 200)
        self.path = path
        self.kind = kind  # "dir", "submodule" or "symlink"


class ServerError(GitHubError):
    """5xx or a dropped connection, still failing after the retries."""


def error_for(message: str, status: int | None, *, github_message: str = "",
              codes: tuple[str, ...] = (), accepted_permissions: str = "") -> GitHubError:
    """The `GitHubError` subclass for a status and GitHub's error codes."""
    kind: type[GitHubError] = GitHubError
    if status == 401:
        kind = Unauthorized
    elif status == 403:
        if accepted_permissions:  # so logs and run records name it too, not only comments
            message += f" (the App needs the permission {accepted_permissions})"
        return Forbidden(message, status, github_message=github_message, codes=codes,
                         accepted_permissions=accepted_permissions)
    elif status == 404:
        kind = NotFound
    elif status == 422:
        kind = AlreadyExists if "already_exists" in codes else ValidationFailed
    elif status == 429:
        kind = RateLimited
    elif status is not None and status >= 500:
        kind = ServerError
    return kind(message, status, github_message=github_message, codes=codes)


@dataclass(frozen=True)
class RepoRef:
    owner: str
    name: str
    installation_id: int

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass(frozen=True)
class IssueInfo:
    number: int
    title: str
    body: str
    state: str  # "open" | "closed"
    author: str
    is_pull_request: bool = False


@dataclass(frozen=True)
class CommentInfo:
    id: int
    author: str
    body: str


@dataclass(frozen=True)
class ReviewCommentInfo:
    """A comment of a PR review: on `path` at `line` (None: outdated), `diff_hunk` being
    what the reviewer saw."""

    id: int
    author: str
    body: str
    path: str
    line: int | None
    diff_hunk: str


@dataclass(frozen=True)
class PullInfo:
    number: int
    url: str  # html_url
    head: str  # branch name
    state: str
    draft: bool
    head_sha: str = ""  # the commit the branch points at


@dataclass(frozen=True)
class CheckRunInfo:
    """One check run on a commit. For a GitHub Actions check run (`app_slug`
    "github-actions") the id is the job's id, whose log the Actions API serves; other
    apps' checks have no log, only `title`, `summary` and `text` (all untrusted)."""

    id: int
    name: str
    status: str  # queued, in_progress, completed
    conclusion: str | None  # failure, success, ... once completed
    app_slug: str
    title: str = ""
    summary: str = ""
    text: str = ""


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    author_email: str
    committer_email: str


@dataclass(frozen=True)
class ReviewInfo:
    """A submitted review of a PR: who, on which commit, approved / changes_requested /
    commented (GitHub's upper-case state, lower-cased)."""

    author: str
    commit_id: str
    state: str


class GitHubApi(Protocol):
    """What the pipeline and the receiver may ask of GitHub, for one App."""

    def installation_token(self, repo: RepoRef) -> str:
        """A fresh installation access token (minted just in time, never stored)."""
        ...

    def clone_url(self, repo: RepoRef) -> str:
        """`https://HOST/OWNER/NAME.git`, without credentials."""
        ...

    def default_branch(self, repo: RepoRef) -> str: ...

    def read_file(self, repo: RepoRef, path: str, ref: str) -> str | None:
        """A file's text at `ref`, or None when it does not exist; `NotAFile` when the
        path is a directory, a submodule or a symlink."""
        ...

    def permission(self, repo: RepoRef, username: str) -> Permission: ...

    def issue(self, repo: RepoRef, number: int) -> IssueInfo: ...

    def comments(self, repo: RepoRef, number: int) -> list[CommentInfo]: ...

    def comment(self, repo: RepoRef, number: int, body: str) -> int:
        """Post a comment on an issue or PR; returns the comment id."""
        ...

    def edit_comment(self, repo: RepoRef, comment_id: int, body: str) -> None: ...

    def react(self, repo: RepoRef, content: str, *, issue_number: int | None = None,
              comment_id: int | None = None) -> None:
        """Add a reaction (e.g. "eyes") to an issue or to an issue comment."""
        ...

    def ensure_label(self, repo: RepoRef, name: str, color: str, description: str) -> None:
        """Create the label unless it exists."""
        ...

    def add_labels(self, repo: RepoRef, number: int, labels: list[str]) -> None: ...

    def remove_label(self, repo: RepoRef, number: int, label: str) -> None:
        """Take `label` off the issue or PR; one it does not carry is no error."""
        ...

    def find_open_pull(self, repo: RepoRef, head_branch: str) -> PullInfo | None:
        """The open PR whose head is `OWNER:head_branch`, if any."""
        ...

    def open_draft_pull(self, repo: RepoRef, *, title: str, body: str, head: str,
                        base: str) -> PullInfo: ...

    def update_pull(self, repo: RepoRef, number: int, *, title: str, body: str) -> PullInfo: ...

    def request_review(self, repo: RepoRef, number: int, reviewers: list[str]) -> None: ...

    def review_comments(self, repo: RepoRef, number: int, review_id: int
                        ) -> list[ReviewCommentInfo]:
        """The comments of one submitted review of PR `number`."""
        ...

    def reply_to_review_comment(self, repo: RepoRef, number: int, comment_id: int,
                                body: str) -> int:
        """Answer in the thread of review comment `comment_id` on PR `number`, once."""
        ...

    def check_runs(self, repo: RepoRef, ref: str) -> list[CheckRunInfo]:
        """Every check run on commit `ref` (checks: read)."""
        ...

    def job_log(self, repo: RepoRef, job_id: int, max_bytes: int) -> str | None:
        """The tail of a GitHub Actions job's log, at most `max_bytes` of it (actions:
        read; GitHub answers with a redirect to the log's download URL), or None when
        there is none (expired, or not an Actions job)."""
        ...

    def commit(self, repo: RepoRef, ref: str) -> CommitInfo:
        """Who wrote and committed `ref` (contents: read)."""
        ...

    def reviews(self, repo: RepoRef, number: int) -> list[ReviewInfo]:
        """The reviews submitted on PR `number` (pull requests: read)."""
        ...

    def bot_login(self) -> str:
        """The App's bot user login, e.g. `frognano[bot]`, to ignore our own events."""
        ...

    # -- the Git Data API: the bot's commits, signed by GitHub (bot/git_data.py) --------

    def create_blob(self, repo: RepoRef, content: bytes) -> str:
        """A blob of `content` in the repository; its sha (as git computes it)."""
        ...

    def create_tree(self, repo: RepoRef, base_tree: str, changes: list[TreeChange]) -> str:
        """`base_tree` with `changes` laid over it; the new tree's sha."""
        ...

    def create_commit(self, repo: RepoRef, *, message: str, tree: str,
                      parents: list[str]) -> CreatedCommit:
        """A commit with no author or committer given: GitHub makes the App's bot its
        author and signs it."""
        ...

    def branch_head(self, repo: RepoRef, branch: str) -> str | None:
        """The commit `branch` points at on GitHub, or None when there is no such branch."""
        ...

    def create_branch(self, repo: RepoRef, branch: str, sha: str) -> None:
        """`refs/heads/<branch>` at `sha`; AlreadyExists when the branch exists. One try
        (ServerError on a 5xx or a lost answer): the caller decides about another."""
        ...

    def move_branch(self, repo: RepoRef, branch: str, sha: str, *, force: bool) -> None:
        """Point `branch` at `sha`; without `force` only as a fast-forward (NotFastForward
        otherwise), NotFound when there is no such branch. One try, as create_branch."""
        ...
