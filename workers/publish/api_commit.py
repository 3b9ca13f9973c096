"""The bot's commits made on GitHub through its Git Data API, from the tree the host
built (`solver/hostgit.py`): GitHub signs them, so they show as Verified and pass a
"require signed commits" rule, which refuses a git push of the bot's own commits.

What is sent is read from the run's host-owned git directory only (`git cat-file` of
the snapshot's objects): never a file of the workspace, never through a link. Only the
paths the commit changes against its parent are uploaded: one blob a changed file, one
tree on the parent's (`base_tree`; a deleted path has `sha` null), one commit. GitHub's
answers are checked against the host's own objects (each blob's sha, and the tree's:
GitHub's tree must be the snapshot's, byte for byte), so what GitHub holds is what was
tested. Cost: (changed files) + 2 requests a commit, and the ref write (see pull.py,
review.py); docs/VERIFIED_COMMITS.md has the figures and the rate limits.
"""

from __future__ import annotations

import logging

from bot.git_data import TreeChange
from bot.github_api import AlreadyExists, GitHubApi, GitHubError, RepoRef
from solver.hostgit import GitError, HostRepo
from solver.policy import forbidden_paths
from workers.repo_cache import RepoCache

log = logging.getLogger(__name__)

# Bounds on one commit's upload, beyond the snapshot's own limit on the patch: a patch
# says little about the files it touches (one line changed in a large file, or a large
# file that compresses well in `git diff --binary`).
MAX_UPLOAD_FILES = 1000
MAX_UPLOAD_BYTES_PER_PATCH_BYTE = 10  # 50 MiB for the default 5 MiB patch limit


class UploadRefused(GitError):
    """The change cannot be uploaded as it is (too many files or bytes, a forbidden
    path, or GitHub holding something else than the host built): nothing was pushed."""


def create_commit(api: GitHubApi, repo: RepoRef, host: HostRepo, *, tree: str, parent: str,
                  message: str) -> str:
    """A commit of `tree` (in the host's objects) on `parent` (a commit GitHub has),
    made on GitHub and signed by it; its sha there. No ref moves: the caller's push
    points the branch at it."""
    found = host.tree_changes(parent, tree)
    changes = [TreeChange(path, mode, sha) for path, mode, sha, _ in found]
    _refuse_unsafe(host, changes)
    _bound(host, changes)
    # Blobs GitHub holds already: the parent's, at the paths the change replaces (a mode
    # change, a file moved); each other blob is sent once.
    uploaded: dict[str, str] = {before: path for path, _, _, before in found if before}
    sent = 0
    for change in changes:
        if change.sha is None or change.mode == "160000" or change.sha in uploaded:
            continue  # deleted, a gitlink (no blob to send), or on GitHub already
        answered = api.create_blob(repo, host.object_bytes(change.sha))
        if answered != change.sha:
            raise UploadRefused(f"GitHub stored `{change.path}` as {answered[:12]}, not "
                                f"{change.sha[:12]}: nothing was pushed")
        uploaded[change.sha] = change.path
        sent += 1
    made = api.create_tree(repo, host.tree_of(parent), changes)
    if made != tree:
        raise UploadRefused(f"GitHub's tree {made[:12]} is not the tested tree "
                            f"{tree[:12]}: nothing was pushed")
    commit = api.create_commit(repo, message=message, tree=tree, parents=[parent])
    if not commit.verified:  # GitHub did not sign it: a signed-commits rule will refuse it
        log.warning("GitHub did not sign commit %s (%s)", commit.sha[:12], commit.reason)
    log.info("commit %s made on GitHub: %d paths, %d blobs uploaded, verified: %s",
             commit.sha[:12], len(changes), sent, commit.verified)
    return commit.sha


def _refuse_unsafe(host: HostRepo, changes: list[TreeChange]) -> None:
    """The publish policy again, on exactly what is uploaded (a replayed tree too):
    workflows, local actions and git plumbing are never sent, nor a link standing in for
    their folders."""
    links = {c.path: host.object_bytes(c.sha)[:4096].decode("utf-8", "surrogateescape")
             for c in changes if c.mode == "120000" and c.sha is not None}
    unsafe = forbidden_paths([c.path for c in changes], (), links)
    if unsafe:
        raise UploadRefused(f"refusing to push {', '.join(unsafe[:5])}: workflow or git "
                            "plumbing paths")


def _bound(host: HostRepo, changes: list[TreeChange]) -> None:
    if len(changes) > MAX_UPLOAD_FILES:
        raise UploadRefused(f"the change touches {len(changes)} paths, more than "
                            f"{MAX_UPLOAD_FILES} uploaded in one commit: nothing was pushed")
    limit = host.max_diff_bytes * MAX_UPLOAD_BYTES_PER_PATCH_BYTE
    shas = {c.sha for c in changes if c.sha is not None and c.mode != "160000"}
    total = sum(host.object_size(sha) for sha in shas)
    if total > limit:
        raise UploadRefused(f"the changed files hold {total} bytes, more than {limit} "
                            "uploaded in one commit: nothing was pushed")


def force_branch(api: GitHubApi, repo: RepoRef, branch: str, sha: str) -> None:
    """`branch` at `sha`: created, or moved by force where it exists (the bot owns its
    `frognano/` branches). One try of each; the caller retries and asks about a cancel."""
    try:
        api.create_branch(repo, branch, sha)
    except AlreadyExists:  # an earlier run's branch, or this try's own lost answer
        api.move_branch(repo, branch, sha, force=True)


def know_pushed(cache: RepoCache, host: HostRepo, api: GitHubApi, repo: RepoRef,
                branch: str, sha: str) -> None:
    """The host's git directory learns the commit GitHub made (git smart HTTP, a fetch
    only): its `refs/heads/<branch>` is that commit, as after a push. Best effort: the
    branch is on GitHub whatever happens here."""
    try:
        head = cache.fetch_branch(host.git_dir, api.clone_url(repo), branch,
                                  api.installation_token(repo))
        if head == sha:
            host.point_branch(branch, sha)
    except (GitError, GitHubError) as exc:
        log.warning("could not fetch the pushed %s: %s", branch, exc)
