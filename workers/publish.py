"""Turning a passing run into a pushed branch and a draft PR, outside the sandbox.

The commit is made from the snapshot's tree in the run's host-owned git directory
(`workers/hostgit.py`); the workspace and its `.git` are never read here.
"""

from __future__ import annotations

import logging
import time

import pathspec

from bot.github_api import GitHubApi, PullInfo, RepoRef
from bot.messages import NEEDS_REVIEW_LABEL
from workers.hostgit import GitError, HostRepo, Identity, Snapshot
from workers.repo_cache import RepoCache

# Workflows, and the local actions they run (`uses: ./.github/actions/x` runs with secrets).
ALWAYS_FORBIDDEN = (".github/workflows/", ".github/actions/")
PUSH_ATTEMPTS = 3
PUSH_BACKOFF_SECONDS = 1.0

log = logging.getLogger(__name__)


def branch_for(issue_number: int) -> str:
    return f"frognano/issue-{issue_number}"


def forbidden_paths(paths: list[str], protected: tuple[str, ...]) -> list[str]:
    """Paths the bot must never push: workflows, and the repository's `protected_paths`,
    matched as .gitignore lines are (`**/settings.py` also matches `settings.py`, `docs`
    and `/docs/**` protect the folder, a pattern without a slash matches at any depth)."""
    spec = pathspec.GitIgnoreSpec.from_lines(protected)
    return [path for path in paths
            if path.startswith(ALWAYS_FORBIDDEN) or spec.match_file(path)]


def bot_identity(login: str) -> Identity:
    return (login, f"{login}@users.noreply.github.com")


def push_with_retries(cache: RepoCache, host: HostRepo, url: str, commit: str, branch: str,
                      token: str) -> None:
    """Force-push, again after a failure: a force-push is idempotent, and a dropped
    connection must not throw away a run whose tests passed."""
    for attempt in range(1, PUSH_ATTEMPTS + 1):
        try:
            cache.push(host.git_dir, url, commit, branch, token)
            return
        except GitError as exc:
            if attempt == PUSH_ATTEMPTS:
                raise
            wait = PUSH_BACKOFF_SECONDS * 2 ** (attempt - 1)
            log.warning("push of %s failed (%s), retrying in %.0f s", branch, exc, wait)
            time.sleep(wait)


def push_and_open_pull(*, github: GitHubApi, cache: RepoCache, repo: RepoRef, host: HostRepo,
                       snapshot: Snapshot, issue_number: int, title: str, body: str,
                       base: str, message: str, reviewer: str) -> PullInfo:
    """Commit the snapshot's tree, force-push `frognano/issue-N`, then open or update its
    one draft PR."""
    api = github
    branch = branch_for(issue_number)
    commit = host.commit(snapshot.tree, branch, message, identity=bot_identity(api.bot_login()))
    # Minted just before use: the clone's token may have expired during a long run.
    push_with_retries(cache, host, api.clone_url(repo), commit, branch,
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
