"""The run dashboard: a read-only view of run records and their transcripts, served by the
receiver under /runs.

Transcripts hold untrusted text (issue bodies, model output, tool output), so every value
goes through Jinja's autoescaping and pages carry a nonce-based Content-Security-Policy:
an injected `<script>` would be shown as text, and would not run even if it slipped through.
Transcripts of private repositories must not be public, so with no auth configured the
dashboard refuses to serve.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from jinja2 import Environment
from starlette.concurrency import run_in_threadpool

from bot import pages
from bot.deps import (
    NOT_CONFIGURED,
    Dashboard,
    DashboardAuth,
    DashboardDep,
    ScriptViewer,
    Viewer,
    with_session,
)
from bot.pages import duration
from runstore.store import RUN_STATUSES, Run, RunStore
from solver import old_names
from solver.verdict.evidence import TestEvidence

__all__ = ["DashboardAuth", "compare_tests", "router"]

LIVE_POLL_MS = 2000


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


def _environment() -> Environment:
    env = pages.environment()
    env.filters.update(diff_lines=diff_lines)
    env.globals.update(compare_tests=compare_tests, statuses=RUN_STATUSES)
    return env


def dashboard_state(store: RunStore, auth: DashboardAuth) -> Dashboard:
    """What `create_app` puts on `app.state.dashboard` for the routes below."""
    return Dashboard(store, auth, _environment())


def _page(dashboard: Dashboard, template: str, status_code: int = 200,
          **context: Any) -> HTMLResponse:
    return pages.render_page(dashboard.env, template, status_code, poll_ms=LIVE_POLL_MS,
                             **context)


# --- the router ---------------------------------------------------------------------------

router = APIRouter(include_in_schema=False)


@router.post("/runs/login")
async def login(request: Request, dashboard: DashboardDep) -> Response:
    auth = dashboard.auth
    if not auth.configured:
        return _page(dashboard, "denied.html", 403, message=NOT_CONFIGURED)
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    given = (form.get("token") or [""])[0]
    target = (form.get("next") or ["/runs"])[0]
    if not target.startswith("/runs") or target.startswith("//"):
        target = "/runs"  # never an open redirect
    if not auth.token_matches(given):
        return _page(dashboard, "login.html", 401, token_login=bool(auth.token),
                     next=target, wrong=True)
    return with_session(RedirectResponse(target, 303), auth, request)


@router.get("/runs")
async def runs_list(dashboard: Viewer, repo: str = "", status: str = "",
                    issue: str = "") -> Response:
    store = dashboard.store
    runs, repos = await run_in_threadpool(lambda: (
        store.list_runs(repo=repo or None, status=status or None, issue=issue or None,
                        limit=200), store.repos()))
    return _page(dashboard, "runs.html", runs=runs, repos=repos,
                 filters={"repo": repo, "status": status, "issue": issue})


@router.get("/runs/{run_id:int}")
async def run_page(dashboard: Viewer, run_id: int) -> Response:
    run = await run_in_threadpool(dashboard.store.get_run, run_id)
    if run is None:
        return _page(dashboard, "denied.html", 404, message=f"There is no run {run_id}.")
    events = await run_in_threadpool(_events, dashboard.store, run, 0)
    result = next((record for _, record in reversed(events)
                   if record.get("kind") == "result"), None)
    steps = model_steps(events) if _failed(run, result) else None
    return _page(dashboard, "run.html", run=run, events=events, result=result,
                 read_first=read_first(events), services=services(events), steps=steps,
                 evidence=evidence(events),
                 next_seq=events[-1][0] if events else 0)


@router.get("/runs/{run_id:int}/live")
async def run_live(dashboard: ScriptViewer, run_id: int, after: int = 0) -> Response:
    """New transcript records as HTML fragments (rendered and escaped here, so the page's
    script only inserts markup we made), and the run's current totals."""
    run = await run_in_threadpool(dashboard.store.get_run, run_id)
    if run is None:
        return JSONResponse({"error": "no such run"}, 404)
    events = await run_in_threadpool(_events, dashboard.store, run, after)
    fragment = dashboard.env.get_template("events.html").render(events=events)
    return JSONResponse({
        "status": run.status, "finished": run.finished, "steps": run.steps,
        "tokens": run.tokens, "duration": duration(run.duration),
        "next": events[-1][0] if events else after, "html": fragment,
    }, headers={"Cache-Control": "no-store"})


@router.get("/runs/{owner}/{repo}/{issue}/{run_number:int}")
async def run_by_number(dashboard: Viewer, owner: str, repo: str, issue: str,
                        run_number: int) -> Response:
    """The URL shape the PR body links (workers/run_issue.py): the issue's Nth run."""
    run = await run_in_threadpool(dashboard.store.find_run, f"{owner}/{repo}", issue,
                                  run_number)
    if run is None:
        return _page(dashboard, "denied.html", 404,
                     message=f"No run recorded for {owner}/{repo}#{issue} run {run_number}.")
    return RedirectResponse(f"/runs/{run.id}", 303)


# --- a failed run's steps -----------------------------------------------------------------


@dataclass(frozen=True)
class StepLine:
    """One model turn (or a model error) as a line of the failed run's overview."""

    seq: int  # the transcript record it links to
    step: int
    round: int  # the agent round, counted from 1
    did: list[str]  # each tool call, as "Tool: its main argument"
    tokens: int
    note: str  # a cut-off turn, a parse error, a model error; "" when none


def _failed(run: Run, result: dict[str, Any] | None) -> bool:
    """A finished run whose change was not accepted: there is no diff to lead with, so the
    page leads with what the model did."""
    if result is not None:
        return not result.get("tests_passed")
    return run.finished and run.status in ("failed", "error")


def _call_line(call: dict[str, Any]) -> str:
    arguments = call.get("arguments")
    main = next((value for value in arguments.values() if isinstance(value, str)), "") \
        if isinstance(arguments, dict) else ""
    main = main.strip().splitlines()[0] if main.strip() else ""
    return f"{call.get('name')}: {main[:100]}" if main else str(call.get("name"))


def model_steps(events: list[tuple[int, dict[str, Any]]]) -> list[StepLine]:
    """The model's turns and errors, in transcript order."""
    lines = []
    for seq, record in events:
        if record.get("kind") == "turn":
            usage = record.get("usage") or {}
            cut_off = record.get("finish_reason") == "length"
            problems = record.get("parse_errors") or []
            note = "did not end its turn" if cut_off else \
                (f"{len(problems)} unreadable tool call(s)" if problems else "")
            calls = [c for c in record.get("tool_calls") or [] if isinstance(c, dict)]
            lines.append(StepLine(seq, int(record.get("step") or 0),
                                  int(record.get("round") or 0) + 1,
                                  [_call_line(call) for call in calls],
                                  int(usage.get("completion_tokens") or 0), note))
        elif record.get("kind") == "error":
            lines.append(StepLine(seq, int(record.get("step") or 0), 0, [], 0,
                                  f"model error: {record.get('reason')}"))
    return lines


def read_first(events: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The latest verdict's "Read this first" flags (solver/verdict/change_flags.py):
    the result's, or while the run goes on, its last judged round's."""
    for _, record in reversed(events):
        verdict = record.get("verdict") if record.get("kind") in ("result", "tests") else None
        if isinstance(verdict, dict):
            flags = verdict.get("read_first") or []
            return [f for f in flags if isinstance(f, dict)]
    return []


def evidence(events: list[tuple[int, dict[str, Any]]]) -> list[TestEvidence] | None:
    """The latest verdict's evidence, per test (solver/verdict/evidence.py); None before
    any verdict, or for a record that holds none it can read."""
    for _, record in reversed(events):
        verdict = record.get("verdict") if record.get("kind") in ("result", "tests") else None
        if isinstance(verdict, dict) and isinstance(verdict.get("evidence"), list):
            found = []
            for entry in verdict["evidence"]:
                try:
                    found.append(TestEvidence.from_dict(entry))
                except ValueError:  # a record this version cannot read: left out
                    continue
            return found
    return None


def services(events: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The run's test services (solver/service_report.py): the result's (what ran, or
    what was asked when they did not start), or while the run goes on, what the agent's
    sandbox started."""
    for _, record in reversed(events):
        if record.get("kind") in ("result", "run") and "services" in record:
            listed = record.get("services") or []
            return [s for s in listed if isinstance(s, dict) and s.get("label")]
    return []


def _events(store: RunStore, run: Run, after: int) -> list[tuple[int, dict[str, Any]]]:
    """The run's transcript records after `after`: from the database, or, for a run recorded
    without events, from its transcript file when this host can read it. Records stored
    before the rename of issue 22 §1 come in today's names (solver/old_names.py)."""
    return [(seq, old_names.current_record(record))
            for seq, record in _stored_events(store, run, after)]


def _stored_events(store: RunStore, run: Run, after: int
                   ) -> list[tuple[int, dict[str, Any]]]:
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
