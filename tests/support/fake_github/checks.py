"""The fake's checks and Actions: check runs on commits, an Actions job's log behind the
302 GitHub answers, "Get a commit", and the check_suite / check_run deliveries GitHub
would send when a head's checks complete.

A test sets a head's check runs with `fake.checks.set_runs(...)` (name, conclusion, the
app that made it — `github-actions` or another — and the log text) and builds the
webhook payloads with `check_suite_payload` / `check_run_payload`. Registered from
`api.build_app`; its routes' permissions are in api.py's `_ROUTE_PERMISSIONS`.
"""

from __future__ import annotations

import secrets
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from tests.support.fake_github import objects
from tests.support.fake_github.git_data import verification_json

if TYPE_CHECKING:
    from tests.support.fake_github.server import FakeGitHub, Repo

# Where a job's log is downloaded from: GitHub's is another host with a signed URL and
# no Authorization; the fake serves it itself, outside the REST API (no OpenAPI, no token).
DOWNLOAD_PREFIX = "/_downloads/job-logs/"
ACTIONS = "github-actions"


@dataclass
class FakeCheckRun:
    id: int
    name: str
    head_sha: str
    status: str = "completed"
    conclusion: str | None = "failure"
    app_slug: str = ACTIONS
    log: str | None = None  # an Actions job's log; None: no log (another app's check)
    title: str = ""
    summary: str = ""
    text: str = ""
    suite_id: int = 0
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class CheckState:
    """Check runs by (owner, repo, head sha); the signed download URLs handed out."""

    runs: dict[tuple[str, str, str], list[FakeCheckRun]] = field(default_factory=dict)
    downloads: dict[str, int] = field(default_factory=dict)  # signature → job id
    # Submitted reviews by (owner, repo, pull): (id, login, commit, STATE, when).
    reviews: dict[tuple[str, str, int], list[tuple[int, str, str, str, datetime]]] = field(
        default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set_runs(self, fake: FakeGitHub, owner: str, repo: str, sha: str,
                 runs: list[dict[str, Any]]) -> list[FakeCheckRun]:
        """Replace the head's check runs; each dict holds FakeCheckRun's fields but the
        id and sha. One check suite per app, as GitHub makes them."""
        suites: dict[str, int] = {}
        made = []
        for spec in runs:
            app = spec.get("app_slug", ACTIONS)
            suite = suites.setdefault(app, fake.next_id())
            made.append(FakeCheckRun(id=fake.next_id(), head_sha=sha, suite_id=suite, **spec))
        with self.lock:
            self.runs[(owner, repo, sha)] = made
        return made

    def add_review(self, fake: FakeGitHub, owner: str, repo: str, pull: int, login: str,
                   commit: str, state: str = "APPROVED") -> None:
        """A review as submitted on github.com (its delivery is the test's to send)."""
        fake.user_id(login)
        with self.lock:
            self.reviews.setdefault((owner, repo, pull), []).append(
                (fake.next_id(), login, commit, state, datetime.now(UTC)))

    def of(self, owner: str, repo: str, sha: str) -> list[FakeCheckRun]:
        with self.lock:
            return list(self.runs.get((owner, repo, sha), []))

    def job(self, job_id: int) -> FakeCheckRun | None:
        with self.lock:
            return next((r for runs in self.runs.values() for r in runs if r.id == job_id),
                        None)


def _app_json(fake: FakeGitHub, slug: str, user: Callable[[str], dict[str, Any]]
              ) -> dict[str, Any]:
    app_id = fake.app_id if slug == fake.app_slug else 15368  # GitHub Actions' App id
    return objects.app(fake.api_url, app_id, slug, user("github" if slug == ACTIONS else
                                                        "frognano-owner"),
                       datetime(2024, 1, 1, tzinfo=UTC))


def check_run_json(fake: FakeGitHub, repo: Repo, run: FakeCheckRun,
                   user: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    full = f"{repo.owner}/{repo.name}"
    url = f"{fake.api_url}/repos/{full}/check-runs/{run.id}"
    done = run.status == "completed"
    return {
        "id": run.id, "head_sha": run.head_sha, "node_id": objects.node_id("CheckRun", run.id),
        "external_id": "", "url": url, "html_url": f"{fake.api_url}/{full}/runs/{run.id}",
        "details_url": f"{fake.api_url}/{full}/actions/runs/{run.id}/job/{run.id}",
        "status": run.status, "conclusion": run.conclusion if done else None,
        "started_at": objects.iso(run.created_at),
        "completed_at": objects.iso(run.created_at) if done else None,
        "output": {"title": run.title or None, "summary": run.summary or None,
                   "text": run.text or None, "annotations_count": 0,
                   "annotations_url": f"{url}/annotations"},
        "name": run.name, "check_suite": {"id": run.suite_id},
        "app": _app_json(fake, run.app_slug, user), "pull_requests": [],
    }


def _git(repo: Repo, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo.bare_path, capture_output=True,
                          text=True, check=False).stdout


def commit_json(fake: FakeGitHub, repo: Repo, sha: str) -> dict[str, Any] | None:
    """"Get a commit" from the bare repository (no files or stats: the bot reads who)."""
    shown = _git(repo, "show", "-s", "--format=%H%n%T%n%P%n%an%n%ae%n%aI%n%cn%n%ce%n%cI%n%B",
                 sha, "--")
    if not shown.strip():
        return None
    full_sha, tree, parents, an, ae, ad, cn, ce, cd, *message = shown.split("\n")
    full = f"{repo.owner}/{repo.name}"
    api = f"{fake.api_url}/repos/{full}"
    return {
        "url": f"{api}/commits/{full_sha}", "sha": full_sha,
        "node_id": objects.node_id("Commit", int(full_sha[:8], 16)),
        "html_url": f"{fake.api_url}/{full}/commit/{full_sha}",
        "comments_url": f"{api}/commits/{full_sha}/comments",
        "commit": {"url": f"{api}/git/commits/{full_sha}",
                   "author": {"name": an, "email": ae, "date": ad},
                   "committer": {"name": cn, "email": ce, "date": cd},
                   "message": "\n".join(message).strip(), "comment_count": 0,
                   "tree": {"sha": tree, "url": f"{api}/git/trees/{tree}"},
                   # GitHub's signature on what it made for the App (git_data.py).
                   "verification": verification_json(repo, full_sha, tree, cd)},
        # No GitHub account linked: GitHub's "empty object" (openapi-core rejects a null).
        "author": {}, "committer": {},
        "parents": [{"sha": p, "url": f"{api}/commits/{p}",
                     "html_url": f"{fake.api_url}/{full}/commit/{p}"}
                    for p in parents.split()],
    }


def register_check_routes(app: FastAPI, fake: FakeGitHub,
                          repo_of: Callable[[str, str, Request], Repo],
                          user: Callable[[str], dict[str, Any]],
                          error: Callable[[int, str], Exception]) -> None:
    @app.get("/repos/{owner}/{name}/commits/{ref}/check-runs")
    async def list_check_runs(owner: str, name: str, ref: str,
                              request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        sha = _git(repo, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}").strip() or ref
        runs = [check_run_json(fake, repo, r, user) for r in fake.checks.of(owner, name, sha)]
        return JSONResponse({"total_count": len(runs), "check_runs": runs})

    @app.get("/repos/{owner}/{name}/actions/jobs/{job_id}/logs")
    async def job_logs(owner: str, name: str, job_id: int, request: Request) -> Response:
        repo_of(owner, name, request)
        job = fake.checks.job(job_id)
        if job is None or job.app_slug != ACTIONS or job.log is None:
            raise error(404, "Not Found")
        signature = secrets.token_urlsafe(16)
        with fake.checks.lock:
            fake.checks.downloads[signature] = job_id
        return RedirectResponse(f"{fake.api_url}{DOWNLOAD_PREFIX}{job_id}?sig={signature}",
                                status_code=302)

    @app.get(DOWNLOAD_PREFIX + "{job_id}")
    async def download_log(job_id: int, sig: str = "") -> Response:
        with fake.checks.lock:
            allowed = fake.checks.downloads.pop(sig, None) == job_id  # the URL works once
        job = fake.checks.job(job_id)
        if not allowed or job is None or job.log is None:
            return Response("Server failed to authenticate the request.", status_code=403)
        return Response(job.log.encode(), media_type="text/plain")

    @app.get("/repos/{owner}/{name}/pulls/{number}/reviews")
    async def list_reviews(owner: str, name: str, number: int,
                           request: Request) -> JSONResponse:
        repo_of(owner, name, request)
        with fake.checks.lock:
            found = list(fake.checks.reviews.get((owner, name, number), []))
        base = f"{fake.api_url}/{owner}/{name}/pull/{number}"
        api = f"{fake.api_url}/repos/{owner}/{name}/pulls/{number}"
        return JSONResponse([{
            "id": review_id, "node_id": objects.node_id("PullRequestReview", review_id),
            "user": user(login), "body": "", "state": state,
            "html_url": f"{base}#pullrequestreview-{review_id}", "pull_request_url": api,
            "_links": {"html": {"href": f"{base}#pullrequestreview-{review_id}"},
                       "pull_request": {"href": api}},
            "submitted_at": objects.iso(when), "commit_id": commit,
            "author_association": "COLLABORATOR"}
            for review_id, login, commit, state, when in found])

    @app.get("/repos/{owner}/{name}/commits/{ref}")
    async def get_commit(owner: str, name: str, ref: str, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        found = commit_json(fake, repo, ref)
        if found is None:
            raise error(422, f"No commit found for SHA: {ref}")
        return JSONResponse(found)


# --- the deliveries --------------------------------------------------------------------


def _head_commit(fake: FakeGitHub, owner: str, repo: str, sha: str) -> dict[str, Any]:
    shown = _git(fake.repo(owner, repo), "show", "-s", "--format=%T%n%an%n%ae%n%cn%n%ce%n%cI%n%s",
                 sha, "--").split("\n")
    tree, an, ae, cn, ce, when, subject = (shown + [""] * 7)[:7]
    return {"id": sha, "tree_id": tree, "message": subject, "timestamp": when,
            "author": {"name": an, "email": ae}, "committer": {"name": cn, "email": ce}}


def _pulls_for(fake: FakeGitHub, owner: str, repo: str, branch: str, sha: str
               ) -> list[dict[str, Any]]:
    found = [p for p in fake.pulls(owner, repo) if p.head == branch and p.state == "open"]
    base_sha = lambda p: fake.branch_sha(owner, repo, p.base) or "0" * 40  # noqa: E731
    return [{"url": f"{fake.api_url}/repos/{owner}/{repo}/pulls/{p.number}", "id": p.id,
             "number": p.number, "head": {"ref": branch, "sha": sha},
             "base": {"ref": p.base, "sha": base_sha(p)}} for p in found]


def check_suite_payload(fake: FakeGitHub, owner: str, repo: str, branch: str, sha: str, *,
                        conclusion: str = "failure", app_slug: str = ACTIONS,
                        sender: str = "github-actions[bot]") -> dict[str, Any]:
    """A `check_suite.completed` delivery for `sha` on `branch`, as GitHub sends it."""
    runs = [r for r in fake.checks.of(owner, repo, sha) if r.app_slug == app_slug]
    return {"action": "completed", "check_suite": {
        "id": runs[0].suite_id if runs else fake.next_id(), "head_branch": branch,
        "head_sha": sha, "status": "completed", "conclusion": conclusion,
        "app": {"id": 15368, "slug": app_slug, "name": app_slug},
        "pull_requests": _pulls_for(fake, owner, repo, branch, sha),
        "head_commit": _head_commit(fake, owner, repo, sha),
        "latest_check_runs_count": len(runs)},
        **_envelope(fake, owner, repo, sender)}


def check_run_payload(fake: FakeGitHub, owner: str, repo: str, branch: str,
                      run: FakeCheckRun, *, sender: str = "github-actions[bot]"
                      ) -> dict[str, Any]:
    """A `check_run.completed` delivery for one run (no head commit in it, as on GitHub)."""
    return {"action": "completed", "check_run": {
        "id": run.id, "name": run.name, "head_sha": run.head_sha, "status": run.status,
        "conclusion": run.conclusion, "app": {"id": 15368, "slug": run.app_slug},
        "check_suite": {"id": run.suite_id, "head_branch": branch, "head_sha": run.head_sha},
        "pull_requests": _pulls_for(fake, owner, repo, branch, run.head_sha)},
        **_envelope(fake, owner, repo, sender)}


def _envelope(fake: FakeGitHub, owner: str, repo: str, sender: str) -> dict[str, Any]:
    return {"repository": {"name": repo, "full_name": f"{owner}/{repo}",
                           "owner": {"login": owner, "type": "User"}},
            "sender": {"login": sender, "type": "Bot" if sender.endswith("[bot]") else "User"},
            "installation": {"id": fake.installation_id}}
