"""The handful of GitHub verbs the bot needs; nothing else in the project sees githubkit.

`bot/github_client.py` implements this protocol with githubkit; tests run it
against the local fake GitHub under `tests/fake_github/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

Permission = Literal["admin", "maintain", "write", "triage", "read", "none"]
WRITE_PERMISSIONS: tuple[Permission, ...] = ("admin", "maintain", "write")


class GitHubError(RuntimeError):
    """GitHub answered with an error the caller should report (status and message kept)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


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
        """A file's text at `ref`, or None when it does not exist."""
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

    def bot_login(self) -> str:
        """The App's bot user login, e.g. `frognano[bot]`, to ignore our own events."""
        ...
