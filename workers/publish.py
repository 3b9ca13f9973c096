"""Turning a passing workspace into a pushed branch and a draft PR, outside the sandbox."""

from __future__ import annotations

import fnmatch
import logging
import time
from pathlib import Path

from bot.github_api import GitHubApi, PullInfo, RepoRef
from bot.messages import NEEDS_REVIEW_LABEL
from workers.gitops import GitError, Identity, git
from workers.local_solve import commit_on_branch
from workers.repo_cache import RepoCache

ALWAYS_FORBIDDEN = (".github/workflows/",)
PUSH_ATTEMPTS = 3
PUSH_BACKOFF_SECONDS = 1.0

log = logging.getLogger(__name__)


def branch_for(issue_number: int) -> str:
    return f"frognano/issue-{issue_number}"


def changed_paths(workspace: Path) -> list[str]:
    """Every path the change adds, edits or removes (both sides of a rename)."""
    git(workspace, "add", "-A")
    names = git(workspace, "diff", "--cached", "--name-only", "--no-renames", "-z")
    return sorted(name for name in names.split("\0") if name)


def forbidden_paths(paths: list[str], protected: tuple[str, ...]) -> list[str]:
    """Paths the bot must never push: workflows, and the repository's protected globs."""
    bad = []
    for path in paths:
        if path.startswith(ALWAYS_FORBIDDEN) or any(
            fnmatch.fnmatchcase(path, pattern)
            or (pattern.endswith("/") and path.startswith(pattern))
            for pattern in protected
        ):
            bad.append(path)
    return bad


def bot_identity(login: str) -> Identity:
    return (login, f"{login}@users.noreply.github.com")


def push_with_retries(cache: RepoCache, workspace: Path, url: str, branch: str,
                      token: str) -> None:
    """Force-push, again after a failure: a force-push is idempotent, and a dropped
    connection must not throw away a run whose tests passed."""
    for attempt in range(1, PUSH_ATTEMPTS + 1):
        try:
            cache.push(workspace, url, branch, token)
            return
        except GitError as exc:
            if attempt == PUSH_ATTEMPTS:
                raise
            wait = PUSH_BACKOFF_SECONDS * 2 ** (attempt - 1)
            log.warning("push of %s failed (%s), retrying in %.0f s", branch, exc, wait)
            time.sleep(wait)


def push_and_open_pull(*, github: GitHubApi, cache: RepoCache, repo: RepoRef, workspace: Path,
                       issue_number: int, title: str, body: str, base: str, message: str,
                       reviewer: str) -> PullInfo:
    """Commit, force-push `frognano/issue-N`, then open or update its one draft PR."""
    api = github
    branch = branch_for(issue_number)
    commit_on_branch(workspace, branch, message, identity=bot_identity(api.bot_login()))
    # Minted just before use: the clone's token may have expired during a long run.
    push_with_retries(cache, workspace, api.clone_url(repo), branch,
                      api.installation_token(repo))
    existing = api.find_open_pull(repo, branch)
    if existing is not None:
        pull = api.update_pull(repo, existing.number, title=title, body=body)
    else:
        pull = api.open_draft_pull(repo, title=title, body=body, head=branch, base=base)
    api.ensure_label(repo, NEEDS_REVIEW_LABEL, "d93f0b",
                     "Opened by FrogNano: a person must review it before merging")
    api.add_labels(repo, pull.number, [NEEDS_REVIEW_LABEL])
    api.request_review(repo, pull.number, [reviewer])
    return pull
