"""The run dashboard: a read-only view of run records and their transcripts, served by the
receiver under /runs.

Transcripts hold untrusted text (issue bodies, model output, tool output), so every value
goes through Jinja's autoescaping and pages carry a nonce-based Content-Security-Policy:
an injected `<script>` would be shown as text, and would not run even if it slipped through.
Transcripts of private repositories must not be public, so with no auth configured the
dashboard refuses to serve.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool

from bot.inert import visible
from bot.settings import BotSettings
from runstore.store import RUN_STATUSES, Run, RunStore

COOKIE = "frognano_dashboard"
COOKIE_PATH = "/runs"
LIVE_POLL_MS = 2000
_NOT_CONFIGURED = ("The run dashboard is off because it has no authentication configured. "
                   "Set FROGNANO_DASHBOARD_TOKEN (a shared token), or FROGNANO_DASHBOARD_USER "
                   "and FROGNANO_DASHBOARD_PASSWORD (HTTP basic auth), and restart the "
                   "receiver.")


# --- auth ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DashboardAuth:
    token: str | None = None
    user: str | None = None
    password: str | None = None

    @classmethod
    def from_settings(cls, settings: BotSettings) -> DashboardAuth:
        return cls(
            token=settings.dashboard_token.get_secret_value() if settings.dashboard_token
            else None,
            user=settings.dashboard_user,
            password=settings.dashboard_password.get_secret_value()
            if settings.dashboard_password else None)

    @property
    def configured(self) -> bool:
        return bool(self.token) or self.basic_configured

    @property
    def basic_configured(self) -> bool:
        return bool(self.user and self.password)

    def session_value(self) -> str:
        """What the cookie holds: derived from the token, never the token itself."""
        assert self.token
        return hmac.new(self.token.encode(), b"frognano-dashboard-session",
                        hashlib.sha256).hexdigest()

    def token_matches(self, candidate: str | None) -> bool:
        return bool(self.token and candidate) and hmac.compare_digest(
            candidate.encode(), self.token.encode())  # type: ignore[union-attr]

    def allows(self, request: Request) -> bool:
        if self.token:
            cookie = request.cookies.get(COOKIE)
            if cookie and hmac.compare_digest(cookie, self.session_value()):
                return True
            header = request.headers.get("authorization", "")
            if header.lower().startswith("bearer ") and self.token_matches(header[7:].strip()):
                return True
            if self.token_matches(request.headers.get("x-frognano-token")):
                return True
        return self.basic_configured and self._basic_matches(
            request.headers.get("authorization", ""))

    def _basic_matches(self, header: str) -> bool:
        if not header.lower().startswith("basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:].strip()).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        assert self.user and self.password
        # Both compared, always, so the timing does not tell which one was wrong.
        user_ok = hmac.compare_digest(user.encode(), self.user.encode())
        password_ok = hmac.compare_digest(password.encode(), self.password.encode())
        return user_ok and password_ok


# --- rendering helpers --------------------------------------------------------------------


def diff_lines(diff: str) -> list[tuple[str, str]]:
    """(css class, line) for a unified diff."""
    lines = []
    for line in diff.splitlines():
        if line.startswith(("diff --git", "+++", "---", "index ", "new file", "deleted file")):
            css = "diff-file"
        elif line.startswith("@@"):
            css = "diff-hunk"
        elif line.startswith("+"):
            css = "diff-add"
        elif line.startswith("-"):
            css = "diff-del"
        else:
            css = "diff-ctx"
        lines.append((css, line))
    return lines


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def http_url(value: str | None) -> bool:
    """Only http(s) links are rendered: a stored `javascript:` URL must not become one."""
    return bool(value) and str(value).startswith(("https://", "http://"))


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


# The order a reviewer wants changed tests in: broken by the change, removed by it, fixed.
_CHANGE_RANK = {"failed": 0, "error": 0, "": 1, "passed": 2}


@dataclass(frozen=True)
class ComparedTests:
    """The per-test comparison as a reviewer reads it: what changed state, then a count of
    what did not (a real suite has hundreds of those)."""

    changed: list[tuple[str, str, str]]  # (test id, before, after); "" where absent
    unchanged: list[tuple[str, str]]  # (test id, state); every test when not `compared`
    compared: bool  # both sides ran; else there is nothing to compare yet

    @property
    def unchanged_counts(self) -> list[tuple[str, int]]:
        """(state, how many), most common first."""
        return Counter(state for _, state in self.unchanged).most_common()


def compare_tests(before: dict[str, Any] | None, after: dict[str, Any] | None) -> ComparedTests:
    """Over the union of tests: those that changed state, and those that did not."""
    tests_before = (before or {}).get("tests") or {}
    tests_after = (after or {}).get("tests") or {}
    if not (before and after):  # one side never ran: no test "changed" to absent
        return ComparedTests([], sorted((tests_before or tests_after).items()), compared=False)
    changed, unchanged = [], []
    for name in sorted(set(tests_before) | set(tests_after)):
        was, now = tests_before.get(name, ""), tests_after.get(name, "")
        if was == now:
            unchanged.append((name, now))
        else:
            changed.append((name, was, now))
    changed.sort(key=lambda row: _CHANGE_RANK.get(row[2], 3))
    return ComparedTests(changed, unchanged, compared=True)


def _shown(value: Any) -> Any:
    """Every `{{ … }}` of every template: autoescaping stops HTML, but a run's texts (the
    model's commands and answers, test output, paths) may hold bidi overrides that reorder
    what a reviewer reads, and escape sequences for whoever saves the page to a terminal:
    shown as escapes (bot/inert.py). Markup is the templates' own."""
    return visible(value) if isinstance(value, str) and not isinstance(value, Markup) \
        else value


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      finalize=_shown)
    env.filters.update(diff_lines=diff_lines, duration=duration, pretty_json=pretty_json,
                       http_url=http_url)
    env.globals.update(compare_tests=compare_tests, statuses=RUN_STATUSES)
    return env


# --- the router ---------------------------------------------------------------------------


def dashboard_router(store: RunStore, auth: DashboardAuth) -> APIRouter:
    router = APIRouter()
    env = _environment()

    def page(request: Request, template: str, status_code: int = 200,
             **context: Any) -> HTMLResponse:
        nonce = secrets.token_urlsafe(16)
        html = env.get_template(template).render(nonce=nonce, poll_ms=LIVE_POLL_MS, **context)
        return HTMLResponse(html, status_code, headers=_security_headers(nonce))

    def guard(request: Request) -> Response | None:
        """None when the viewer may see the dashboard, else the answer to send instead."""
        if not auth.configured:
            return page(request, "denied.html", 403, message=_NOT_CONFIGURED)
        if auth.allows(request):
            return None
        given = request.query_params.get("token")
        if given is not None and auth.token_matches(given):
            # Trade the token in the URL for a cookie, and drop it from the address bar.
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            return _with_session(RedirectResponse(target, 303), auth, request)
        headers = {"WWW-Authenticate": 'Basic realm="frognano dashboard"'} \
            if auth.basic_configured and not auth.token else {}
        answer = page(request, "login.html", 401, token_login=bool(auth.token),
                      next=request.url.path, wrong=given is not None)
        answer.headers.update(headers)
        return answer

    @router.post("/runs/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        if not auth.configured:
            return page(request, "denied.html", 403, message=_NOT_CONFIGURED)
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        given = (form.get("token") or [""])[0]
        target = (form.get("next") or ["/runs"])[0]
        if not target.startswith("/runs") or target.startswith("//"):
            target = "/runs"  # never an open redirect
        if not auth.token_matches(given):
            return page(request, "login.html", 401, token_login=bool(auth.token),
                        next=target, wrong=True)
        return _with_session(RedirectResponse(target, 303), auth, request)

    @router.get("/runs", include_in_schema=False)
    async def runs_list(request: Request, repo: str = "", status: str = "",
                        issue: str = "") -> Response:
        if (denied := guard(request)) is not None:
            return denied
        runs, repos = await run_in_threadpool(lambda: (
            store.list_runs(repo=repo or None, status=status or None, issue=issue or None,
                            limit=200), store.repos()))
        return page(request, "runs.html", runs=runs, repos=repos,
                    filters={"repo": repo, "status": status, "issue": issue})

    @router.get("/runs/{run_id:int}", include_in_schema=False)
    async def run_page(request: Request, run_id: int) -> Response:
        if (denied := guard(request)) is not None:
            return denied
        run = await run_in_threadpool(store.get_run, run_id)
        if run is None:
            return page(request, "denied.html", 404, message=f"There is no run {run_id}.")
        events = await run_in_threadpool(_events, store, run, 0)
        result = next((record for _, record in reversed(events)
                       if record.get("kind") == "result"), None)
        return page(request, "run.html", run=run, events=events, result=result,
                    read_first=read_first(events), next_seq=events[-1][0] if events else 0)

    @router.get("/runs/{run_id:int}/live", include_in_schema=False)
    async def run_live(request: Request, run_id: int, after: int = 0) -> Response:
        """New transcript records as HTML fragments (rendered and escaped here, so the page's
        script only inserts markup we made), and the run's current totals."""
        if (denied := guard(request)) is not None:
            return JSONResponse({"error": "not authorized"}, denied.status_code)
        run = await run_in_threadpool(store.get_run, run_id)
        if run is None:
            return JSONResponse({"error": "no such run"}, 404)
        events = await run_in_threadpool(_events, store, run, after)
        fragment = env.get_template("events.html").render(events=events)
        return JSONResponse({
            "status": run.status, "finished": run.finished, "steps": run.steps,
            "tokens": run.tokens, "duration": duration(run.duration),
            "next": events[-1][0] if events else after, "html": fragment,
        }, headers={"Cache-Control": "no-store"})

    @router.get("/runs/{owner}/{repo}/{issue}/{attempt:int}", include_in_schema=False)
    async def run_by_attempt(request: Request, owner: str, repo: str, issue: str,
                             attempt: int) -> Response:
        """The URL shape the PR body links (workers/run_issue.py)."""
        if (denied := guard(request)) is not None:
            return denied
        run = await run_in_threadpool(store.find_run, f"{owner}/{repo}", issue, attempt)
        if run is None:
            return page(request, "denied.html", 404,
                        message=f"No run recorded for {owner}/{repo}#{issue} attempt "
                                f"{attempt}.")
        return RedirectResponse(f"/runs/{run.id}", 303)

    return router


def read_first(events: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The latest verdict's "Read this first" flags (solver/verdict/change_flags.py):
    the result's, or while the run goes on, its last judged attempt's."""
    for _, record in reversed(events):
        verdict = record.get("verdict") if record.get("kind") in ("result", "tests") else None
        if isinstance(verdict, dict):
            flags = verdict.get("read_first") or []
            return [f for f in flags if isinstance(f, dict)]
    return []


def _events(store: RunStore, run: Run, after: int) -> list[tuple[int, dict[str, Any]]]:
    """The run's transcript records after `after`: from the database, or, for a run recorded
    without events, from its transcript file when this host can read it."""
    if store.has_events(run.id) or not run.transcript_path:
        return store.events(run.id, after)
    try:
        lines = Path(run.transcript_path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    events = []
    for seq, line in enumerate(lines, start=1):
        if seq > after:
            try:
                events.append((seq, json.loads(line)))
            except ValueError:  # a line being written right now
                break
    return events


def _with_session(response: Response, auth: DashboardAuth, request: Request) -> Response:
    response.set_cookie(COOKIE, auth.session_value(), path=COOKIE_PATH, httponly=True,
                        samesite="lax", secure=request.url.scheme == "https",
                        max_age=30 * 24 * 3600)
    return response


def _security_headers(nonce: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; "
            "frame-ancestors 'none'"),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }
