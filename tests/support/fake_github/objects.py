"""JSON objects in GitHub's REST shapes (the fields GitHub's OpenAPI marks required).

Built once per response from the fake's state, so what the client parses looks
like what api.github.com sends; the OpenAPI check on responses keeps them honest.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_id(kind: str, number: int) -> str:
    return base64.b64encode(f"{kind}:{number}".encode()).decode().rstrip("=")


def user(base: str, login: str, user_id: int, *, bot: bool = False) -> JSON:
    url = f"{base}/users/{login}"
    return {
        "login": login, "id": user_id, "node_id": node_id("User", user_id),
        "avatar_url": f"https://avatars.githubusercontent.com/u/{user_id}?v=4",
        "gravatar_id": "", "url": url, "html_url": f"{base}/{login}",
        "followers_url": f"{url}/followers",
        "following_url": f"{url}/following{{/other_user}}",
        "gists_url": f"{url}/gists{{/gist_id}}",
        "starred_url": f"{url}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{url}/subscriptions",
        "organizations_url": f"{url}/orgs", "repos_url": f"{url}/repos",
        "events_url": f"{url}/events{{/privacy}}",
        "received_events_url": f"{url}/received_events",
        "type": "Bot" if bot else "User", "user_view_type": "public", "site_admin": False,
    }


def repository(base: str, owner: JSON, name: str, repo_id: int, default_branch: str,
               created: datetime, *, full: bool) -> JSON:
    full_name = f"{owner['login']}/{name}"
    api = f"{base}/repos/{full_name}"
    templated = {
        "archive_url": "{archive_format}{/ref}", "assignees_url": "assignees{/user}",
        "blobs_url": "git/blobs{/sha}", "branches_url": "branches{/branch}",
        "collaborators_url": "collaborators{/collaborator}", "comments_url": "comments{/number}",
        "commits_url": "commits{/sha}", "compare_url": "compare/{base}...{head}",
        "contents_url": "contents/{+path}", "contributors_url": "contributors",
        "deployments_url": "deployments", "downloads_url": "downloads", "events_url": "events",
        "forks_url": "forks", "git_commits_url": "git/commits{/sha}",
        "git_refs_url": "git/refs{/sha}", "git_tags_url": "git/tags{/sha}", "hooks_url": "hooks",
        "issue_comment_url": "issues/comments{/number}",
        "issue_events_url": "issues/events{/number}",
        "issues_url": "issues{/number}", "keys_url": "keys{/key_id}", "labels_url": "labels{/name}",
        "languages_url": "languages", "merges_url": "merges",
        "milestones_url": "milestones{/number}", "notifications_url":
            "notifications{?since,all,participating}",
        "pulls_url": "pulls{/number}", "releases_url": "releases{/id}",
        "stargazers_url": "stargazers", "statuses_url": "statuses/{sha}",
        "subscribers_url": "subscribers", "subscription_url": "subscription", "tags_url": "tags",
        "teams_url": "teams", "trees_url": "git/trees{/sha}",
    }
    obj: JSON = {key: f"{api}/{suffix}" for key, suffix in templated.items()}
    obj.update({
        "id": repo_id, "node_id": node_id("Repository", repo_id), "name": name,
        "full_name": full_name, "owner": owner, "private": False,
        "html_url": f"{base}/{full_name}", "description": None, "fork": False, "url": api,
        "clone_url": f"{base}/{full_name}.git", "git_url": f"git://fake/{full_name}.git",
        "ssh_url": f"git@fake:{full_name}.git", "svn_url": f"{base}/{full_name}",
        "mirror_url": None, "homepage": None, "language": "Python", "forks": 0,
        "forks_count": 0, "stargazers_count": 0, "watchers_count": 0, "watchers": 0,
        "size": 1, "default_branch": default_branch, "open_issues_count": 0, "open_issues": 0,
        "has_issues": True, "has_projects": False, "has_wiki": False, "has_pages": False,
        "has_downloads": True, "has_discussions": False, "archived": False, "disabled": False,
        "license": None, "pushed_at": iso(created), "created_at": iso(created),
        "updated_at": iso(created), "visibility": "public", "topics": [],
    })
    if full:
        obj.update({"network_count": 0, "subscribers_count": 0})
    return obj


def label(base: str, full_name: str, label_id: int, name: str, color: str,
          description: str | None) -> JSON:
    return {"id": label_id, "node_id": node_id("Label", label_id),
            "url": f"{base}/repos/{full_name}/labels/{name}", "name": name,
            "color": color, "description": description or "", "default": False,
            # githubkit-schemas (2026) requires it; the pinned OpenAPI copy predates it.
            "archived_by": None}


def reactions_rollup(url: str, contents: list[str]) -> JSON:
    kinds = ("+1", "-1", "laugh", "confused", "heart", "hooray", "eyes", "rocket")
    rollup: JSON = {kind: contents.count(kind) for kind in kinds}
    rollup.update({"url": f"{url}/reactions", "total_count": len(contents)})
    return rollup


def issue(base: str, full_name: str, *, issue_id: int, number: int, title: str, body: str,
          state: str, author: JSON, labels: list[JSON], comments: int, created: datetime,
          updated: datetime, reactions: list[str], is_pull: bool) -> JSON:
    api = f"{base}/repos/{full_name}/issues/{number}"
    obj: JSON = {
        "id": issue_id, "node_id": node_id("Issue", issue_id), "url": api,
        "repository_url": f"{base}/repos/{full_name}", "labels_url": f"{api}/labels{{/name}}",
        "comments_url": f"{api}/comments", "events_url": f"{api}/events",
        "html_url": f"{base}/{full_name}/{'pull' if is_pull else 'issues'}/{number}",
        "number": number, "state": state, "title": title, "body": body, "user": author,
        "labels": labels, "assignee": None, "assignees": [], "milestone": None,
        "locked": False, "active_lock_reason": None, "comments": comments,
        "created_at": iso(created), "updated_at": iso(updated), "closed_at": None,
        "author_association": "NONE", "reactions": reactions_rollup(api, reactions),
    }
    if is_pull:
        pull_url = f"{base}/repos/{full_name}/pulls/{number}"
        obj["pull_request"] = {"url": pull_url, "html_url": f"{base}/{full_name}/pull/{number}",
                               "diff_url": f"{base}/{full_name}/pull/{number}.diff",
                               "patch_url": f"{base}/{full_name}/pull/{number}.patch",
                               "merged_at": None}
    return obj


def comment(base: str, full_name: str, *, comment_id: int, issue_number: int, body: str,
            author: JSON, created: datetime, updated: datetime, reactions: list[str]) -> JSON:
    url = f"{base}/repos/{full_name}/issues/comments/{comment_id}"
    return {
        "id": comment_id, "node_id": node_id("IssueComment", comment_id), "url": url,
        "html_url": f"{base}/{full_name}/issues/{issue_number}#issuecomment-{comment_id}",
        "issue_url": f"{base}/repos/{full_name}/issues/{issue_number}", "body": body,
        "user": author, "created_at": iso(created), "updated_at": iso(updated),
        "author_association": "NONE", "reactions": reactions_rollup(url, reactions),
    }


def review_comment(base: str, full_name: str, *, comment_id: int, pull_number: int,
                   review_id: int, body: str, author: JSON, path: str, line: int | None,
                   diff_hunk: str, commit_id: str, created: datetime,
                   in_reply_to: int | None = None) -> JSON:
    url = f"{base}/repos/{full_name}/pulls/comments/{comment_id}"
    html = f"{base}/{full_name}/pull/{pull_number}#discussion_r{comment_id}"
    pull_url = f"{base}/repos/{full_name}/pulls/{pull_number}"
    return {
        **({"in_reply_to_id": in_reply_to} if in_reply_to is not None else {}),
        "id": comment_id, "node_id": node_id("PullRequestReviewComment", comment_id),
        "url": url, "pull_request_review_id": review_id, "diff_hunk": diff_hunk,
        "path": path, "position": line, "original_position": line, "commit_id": commit_id,
        "original_commit_id": commit_id, "user": author, "body": body,
        "created_at": iso(created), "updated_at": iso(created), "html_url": html,
        "pull_request_url": pull_url, "author_association": "COLLABORATOR",
        "_links": {"self": {"href": url}, "html": {"href": html},
                   "pull_request": {"href": pull_url}},
        "line": line, "original_line": line, "side": "RIGHT", "subject_type": "line",
    }


def reaction(reaction_id: int, author: JSON, content: str, created: datetime) -> JSON:
    return {"id": reaction_id, "node_id": node_id("Reaction", reaction_id), "user": author,
            "content": content, "created_at": iso(created)}


def pull(base: str, repo: JSON, *, pull_id: int, number: int, title: str, body: str,
         state: str, draft: bool, author: JSON, head: str, head_sha: str, base_ref: str,
         base_sha: str, labels: list[JSON], reviewers: list[JSON], created: datetime,
         updated: datetime, full: bool) -> JSON:
    full_name = repo["full_name"]
    api = f"{base}/repos/{full_name}/pulls/{number}"
    html = f"{base}/{full_name}/pull/{number}"
    issue_api = f"{base}/repos/{full_name}/issues/{number}"
    owner_login = repo["owner"]["login"]

    def ref(branch: str, sha: str) -> JSON:
        return {"label": f"{owner_login}:{branch}", "ref": branch, "sha": sha,
                "user": repo["owner"], "repo": repo}

    obj: JSON = {
        "url": api, "id": pull_id, "node_id": node_id("PullRequest", pull_id),
        "html_url": html, "diff_url": f"{html}.diff", "patch_url": f"{html}.patch",
        "issue_url": issue_api, "commits_url": f"{api}/commits",
        "review_comments_url": f"{api}/comments",
        "review_comment_url": f"{base}/repos/{full_name}/pulls/comments{{/number}}",
        "comments_url": f"{issue_api}/comments",
        "statuses_url": f"{base}/repos/{full_name}/statuses/{head_sha}",
        "number": number, "state": state, "locked": False, "title": title, "user": author,
        "body": body, "labels": labels, "milestone": None, "active_lock_reason": None,
        "created_at": iso(created), "updated_at": iso(updated), "closed_at": None,
        "merged_at": None, "merge_commit_sha": None, "assignee": None, "assignees": [],
        "requested_reviewers": reviewers, "requested_teams": [],
        "head": ref(head, head_sha), "base": ref(base_ref, base_sha),
        "_links": {key: {"href": href} for key, href in {
            "self": api, "html": html, "issue": issue_api, "comments": f"{issue_api}/comments",
            "review_comments": f"{api}/comments",
            "review_comment": f"{base}/repos/{full_name}/pulls/comments{{/number}}",
            "commits": f"{api}/commits",
            "statuses": f"{base}/repos/{full_name}/statuses/{head_sha}"}.items()},
        "author_association": "NONE", "auto_merge": None, "draft": draft,
    }
    if full:
        obj.update({"merged": False, "mergeable": None, "rebaseable": None,
                    "mergeable_state": "unknown", "merged_by": None, "comments": 0,
                    "review_comments": 0, "maintainer_can_modify": False, "commits": 1,
                    "additions": 0, "deletions": 0, "changed_files": 0})
    return obj


def app(base: str, app_id: int, slug: str, owner: JSON, created: datetime) -> JSON:
    return {
        "id": app_id, "slug": slug, "node_id": node_id("Integration", app_id),
        "client_id": f"Iv1.{app_id:016x}", "owner": owner, "name": slug,
        "description": "frognano test App", "external_url": "https://example.invalid",
        "html_url": f"{base}/apps/{slug}", "created_at": iso(created),
        "updated_at": iso(created),
        "permissions": {"contents": "write", "issues": "write", "pull_requests": "write",
                        "metadata": "read"},
        "events": ["issues", "issue_comment"], "installations_count": 1,
    }


def app_from_manifest(app_json: JSON, *, pem: str, webhook_secret: str,
                      permissions: JSON, events: list[str]) -> JSON:
    """POST /app-manifests/{code}/conversions: the App plus its secrets, shown this once."""
    return {**app_json, "permissions": permissions, "events": events,
            "client_secret": f"fake-client-secret-{app_json['id']}", "pem": pem,
            "webhook_secret": webhook_secret}


def content_file(base: str, full_name: str, path: str, ref: str, sha: str,
                 data: bytes) -> JSON:
    url = f"{base}/repos/{full_name}/contents/{path}?ref={ref}"
    html = f"{base}/{full_name}/blob/{ref}/{path}"
    git = f"{base}/repos/{full_name}/git/blobs/{sha}"
    encoded = base64.encodebytes(data).decode()  # wrapped lines, like GitHub
    return {"type": "file", "encoding": "base64", "size": len(data),
            "name": path.rsplit("/", 1)[-1], "path": path, "content": encoded, "sha": sha,
            "url": url, "git_url": git, "html_url": html,
            "download_url": f"{base}/raw/{full_name}/{ref}/{path}",
            "_links": {"self": url, "git": git, "html": html}}


def content_other(base: str, full_name: str, path: str, ref: str, sha: str, kind: str,
                  size: int = 0, **extra: str) -> JSON:
    """The contents API on a symlink (`target`) or a submodule (`submodule_git_url`)."""
    url = f"{base}/repos/{full_name}/contents/{path}?ref={ref}"
    html = f"{base}/{full_name}/blob/{ref}/{path}"
    git = f"{base}/repos/{full_name}/git/{'trees' if kind == 'submodule' else 'blobs'}/{sha}"
    return {"type": kind, "size": size, "name": path.rsplit("/", 1)[-1], "path": path,
            "sha": sha, "url": url, "git_url": git, "html_url": html,
            "download_url": f"{base}/raw/{full_name}/{ref}/{path}" if kind == "symlink"
            else None, "_links": {"self": url, "git": git, "html": html}, **extra}


def content_directory(base: str, full_name: str, path: str, ref: str,
                      entries: list[tuple[str, str, int, str]]) -> list[JSON]:
    """What the contents API answers for a directory: a JSON array of its entries, each
    `(git type, sha, size, name)` as `git ls-tree -l` says."""
    listed = []
    for kind, sha, size, name in entries:
        item_path = f"{path.rstrip('/')}/{name}"
        url = f"{base}/repos/{full_name}/contents/{item_path}?ref={ref}"
        # A symlink is listed as a "file" in a directory (GitHub keeps that for old
        # clients); a commit entry is a submodule; a tree a "dir".
        shown = {"tree": "dir", "commit": "submodule"}.get(kind, "file")
        git = f"{base}/repos/{full_name}/git/{'trees' if kind == 'tree' else 'blobs'}/{sha}"
        html = f"{base}/{full_name}/{'tree' if kind == 'tree' else 'blob'}/{ref}/{item_path}"
        listed.append({
            "type": shown, "size": size, "name": name, "path": item_path, "sha": sha,
            "url": url, "git_url": git, "html_url": html,
            "download_url": (f"{base}/raw/{full_name}/{ref}/{item_path}"
                             if shown == "file" else None),
            "_links": {"self": url, "git": git, "html": html}})
    return listed


def error(message: str, status: int, errors: list[JSON] | None = None) -> JSON:
    body: JSON = {"message": message,
                  "documentation_url": "https://docs.github.com/rest",
                  "status": str(status)}
    if errors:
        body["errors"] = errors
    return body
