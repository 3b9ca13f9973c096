"""GitHub's Git Data API as plain data: the bot's commits are made through it (blobs, a
tree on the parent's, a commit, a ref), so that GitHub signs them and they show as
Verified, which repositories with a "require signed commits" rule ask of every push.

Sans-I/O: what to send and what GitHub's answers mean. `bot/github_client.py` sends it;
`workers/publish/api_commit.py` drives it from the run's host-owned git directory.

GitHub signs a commit made through `POST /repos/{owner}/{repo}/git/commits` with an App
installation's token only when the request names no author, no committer and no
signature ("Signature verification for bots", docs.github.com, About commit signature
verification): the commit's author is then the App's bot account, and the person who
asked is credited by a `Co-authored-by:` trailer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Modes a tree entry may have, and the object type each names.
ENTRY_TYPES = {"100644": "blob", "100755": "blob", "120000": "blob", "160000": "commit",
               "040000": "tree"}
# GitHub's words for the refusals of a ref write (422, no error code to match on).
REF_EXISTS = "reference already exists"
NOT_FAST_FORWARD = "update is not a fast forward"
# GitHub logins: letters, digits and single hyphens, not at either end, at most 39.
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}")


@dataclass(frozen=True)
class TreeChange:
    """One path of a commit's change against its parent: its new mode and object, or
    `sha` None where the path is deleted."""

    path: str
    mode: str
    sha: str | None


@dataclass(frozen=True)
class CreatedCommit:
    """What GitHub answered to a created commit: its sha and whether it signed it."""

    sha: str
    tree: str
    verified: bool
    reason: str  # GitHub's verification reason: "valid", "unsigned", ...


def blob_payload(encoded: str) -> dict[str, Any]:
    """POST git/blobs: the content base64-encoded (bytes as they are, text or not)."""
    return {"content": encoded, "encoding": "base64"}


def tree_payload(base_tree: str, changes: list[TreeChange]) -> dict[str, Any]:
    """POST git/trees: the parent's tree and only the changed paths on it; a deleted path
    is an entry with `sha` null (GitHub removes it from the base tree)."""
    entries = []
    for change in changes:
        kind = ENTRY_TYPES.get(change.mode)
        if kind is None or kind == "tree":
            raise ValueError(f"no tree entry of mode {change.mode!r} ({change.path!r})")
        entries.append({"path": change.path, "mode": change.mode, "type": kind,
                        "sha": change.sha})
    return {"base_tree": base_tree, "tree": entries}


def commit_payload(message: str, tree: str, parents: list[str]) -> dict[str, Any]:
    """POST git/commits, with no author, committer or signature: GitHub signs it."""
    return {"message": message, "tree": tree, "parents": parents}


def created_commit(data: dict[str, Any]) -> CreatedCommit:
    """A git-commit answer (POST or GET git/commits)."""
    verification = data.get("verification") or {}
    return CreatedCommit(sha=str(data["sha"]), tree=str(data["tree"]["sha"]),
                         verified=bool(verification.get("verified")),
                         reason=str(verification.get("reason", "")))


def ref_refusal(github_message: str) -> str | None:
    """Which refusal a 422 to a ref write is: REF_EXISTS, NOT_FAST_FORWARD or None."""
    said = github_message.casefold()
    for refusal in (REF_EXISTS, NOT_FAST_FORWARD):
        if refusal in said:
            return refusal
    return None


def valid_login(login: str) -> bool:
    """Whether `login` has the shape of a GitHub user's login (never a bot's `x[bot]`)."""
    return bool(_LOGIN.fullmatch(login))


def co_author_trailer(login: str, user_id: int | None) -> str | None:
    """`Co-authored-by: login <id+login@users.noreply.github.com>` for the person who
    asked (GitHub credits that address to the account), or None where the login is not
    a person's login or the id is unknown: then the commit credits nobody."""
    if user_id is None or user_id <= 0 or not valid_login(login):
        return None
    return f"Co-authored-by: {login} <{user_id}+{login}@users.noreply.github.com>"


def with_co_author(message: str, login: str, user_id: int | None) -> str:
    """The commit message with the asker's trailer as its last paragraph (git reads
    trailers only there)."""
    trailer = co_author_trailer(login, user_id)
    if trailer is None:
        return message
    return f"{message.rstrip()}\n\n{trailer}\n"
