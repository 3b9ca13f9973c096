"""The run dashboard: auth, escaping, the PR link shape, live updates, /healthz and /metrics
through the receiver, on SQLite and PostgreSQL, and the pages in a real headless Chromium
(Debian's `chromium`, driven by playwright-python)."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from starlette.testclient import TestClient

from bot.app import create_app
from bot.dashboard import compare_tests
from bot.settings import BotSettings
from bot.triggers import Trigger
from runstore.store import RunStore, upgrade_database
from solver.agent.result import SolveResult
from solver.agent.run_events import (
    BaselineDone,
    Feedback,
    Observation,
    Outputs,
    RunFinished,
    RunStarted,
    TestsJudged,
)
from solver.agent.transcript import Transcript
from solver.models.base import Usage
from solver.service_report import ServiceLine
from solver.verdict.change_flags import ChangeFlag
from solver.verdict.evidence import (
    MODEL,
    NEW_FEATURE,
    PASSES_ON_BASE,
    REPOSITORY,
    REPRODUCES,
    TestEvidence,
)
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.verdict import Verdict
from tests.support.chromium import chromium, keep_screenshot, serve_app
from tests.support.redis_server import RedisServer
from tests.support.run_events import finished, ran_tests, started, turn
from workers.run_recording import RunRecorder

TOKEN = "dashboard-token-for-tests"
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
DIFF = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""


class _NoEnqueue:
    def enqueue(self, trigger: Trigger) -> str:
        raise AssertionError("the dashboard tests deliver no webhooks")

    def close(self) -> None:
        pass


# A suite the size of toolz's (192 tests), of which the change moved two.
UNCHANGED = {**{f"tests/test_more.py::test_{n:03d}": "passed" for n in range(188)},
             "tests/test_more.py::test_net": "skipped", "tests/test_more.py::test_slow": "skipped"}


def _tests(passed: bool, state: str) -> TestVerdict:
    added = {"tests/test_calc.py::test_add_floats": "passed"} if passed else {}
    return ran_tests({"tests/test_calc.py::test_add": state,
                      "tests/test_calc.py::test_sub": "passed", **added, **UNCHANGED},
                     passed=passed, seconds=0.4, output=f"1 {state}")


def record_finished_run(store: RunStore, tmp_path: Path) -> int:
    recorder = RunRecorder.start(store, repo="octo/calc", issue=1, trigger="label", run_number=1)
    with Transcript(tmp_path / "finished.jsonl") as transcript:
        events = Outputs(transcript, recorder)
        events.emit(started())
        events.emit(BaselineDone(tests=_tests(False, "failed")))
        events.emit(turn(1, reasoning="SECRET-REASONING: add uses minus", calls=[
            ("Bash", {"command": "cat calc.py"}, Observation("c1", "Bash", HOSTILE, 0.2))],
            prompt_tokens=900, evaluated=900, completion_tokens=40, model_seconds=1.0))
        events.emit(turn(2, content="Fixed `add`.", reasoning="done", prompt_tokens=950,
                         evaluated=50, completion_tokens=10, model_seconds=0.5))
        final = _tests(True, "passed")
        events.emit(TestsJudged(round=1, exit_reason="agent", tests=final,
                                verdict=Verdict(accepted=True), model_tests=None))
        events.emit(finished(_tests(False, "failed"), final, diff=DIFF, steps=2, seconds=42.0,
                             usage=Usage(prompt_tokens=1850, prompt_tokens_evaluated=950,
                                         completion_tokens=50, prompt_seconds=0.3,
                                         completion_seconds=2.5)))
    recorder.set_pr_url("https://github.example/octo/calc/pull/1")
    recorder.finish("passed", outcome="pr_opened")
    assert recorder.run_id is not None
    return recorder.run_id


@pytest.fixture
def store(database_url: str) -> Iterator[RunStore]:
    """On SQLite and on PostgreSQL (tests/support/postgres_server.py): the pages and /metrics run
    the same queries on both."""
    store = RunStore(database_url)
    yield store
    store.close()


def make_app(store: RunStore, redis_server: RedisServer, tmp_path: Path, **auth: str) -> Any:
    settings = BotSettings(GITHUB_WEBHOOK_SECRET="s" * 32, FROGNANO_REDIS_URL=redis_server.url,
                           **auth)
    return create_app(settings, enqueuer=_NoEnqueue(), redis_client=redis_server.client(),
                      run_store=store, setup_env_path=tmp_path / ".env")


@pytest.fixture
def client(store: RunStore, redis_server: RedisServer, tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(make_app(store, redis_server, tmp_path, FROGNANO_DASHBOARD_TOKEN=TOKEN),
                    follow_redirects=False) as client:
        yield client


# --- over HTTP ----------------------------------------------------------------------------


def test_without_auth_configured_the_dashboard_refuses(store: RunStore,
                                                       redis_server: RedisServer,
                                                       tmp_path: Path) -> None:
    record_finished_run(store, tmp_path)
    with TestClient(make_app(store, redis_server, tmp_path)) as client:
        for path in ("/runs", "/runs/1", "/runs/octo/calc/1/1"):
            answer = client.get(path)
            assert answer.status_code == 403
            assert "FROGNANO_DASHBOARD_TOKEN" in answer.text
            assert "SECRET-REASONING" not in answer.text
        assert client.get("/runs/1/live").status_code == 403


def test_token_once_in_the_url_then_a_cookie(client: TestClient) -> None:
    assert client.get("/runs").status_code == 401
    assert client.get("/runs?token=wrong").status_code == 401
    answer = client.get(f"/runs?status=passed&token={TOKEN}")
    assert answer.status_code == 303 and answer.headers["location"] == "/runs?status=passed"
    cookie = answer.cookies.get("frognano_dashboard")
    assert cookie and TOKEN not in cookie
    assert "httponly" in answer.headers["set-cookie"].lower()
    assert client.get("/runs").status_code == 200  # the cookie jar carries it now
    client.cookies.clear()
    assert client.get("/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_login_form_sets_the_cookie_and_never_redirects_offsite(client: TestClient) -> None:
    answer = client.post("/runs/login", content=f"token={TOKEN}&next=//evil.example/x",
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert answer.status_code == 303 and answer.headers["location"] == "/runs"
    assert client.get("/runs").status_code == 200


def test_basic_auth(store: RunStore, redis_server: RedisServer, tmp_path: Path) -> None:
    app = make_app(store, redis_server, tmp_path, FROGNANO_DASHBOARD_USER="ops",
                   FROGNANO_DASHBOARD_PASSWORD="pw")
    with TestClient(app) as client:
        denied = client.get("/runs")
        assert denied.status_code == 401 and "Basic" in denied.headers["www-authenticate"]
        good = base64.b64encode(b"ops:pw").decode()
        bad = base64.b64encode(b"ops:nope").decode()
        assert client.get("/runs", headers={"Authorization": f"Basic {bad}"}).status_code == 401
        assert client.get("/runs", headers={"Authorization": f"Basic {good}"}).status_code == 200


def test_run_page_escapes_the_transcript(client: TestClient, store: RunStore,
                                         tmp_path: Path) -> None:
    run_id = record_finished_run(store, tmp_path)
    client.get(f"/runs?token={TOKEN}")
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert "window.__pwned" in page.text and "<script>window.__pwned" not in page.text
    assert "&lt;script&gt;window.__pwned" in page.text
    assert "<img src=x" not in page.text
    assert "script-src 'nonce-" in page.headers["content-security-policy"]
    assert '<span class="diff-add">+    return a + b</span>' in page.text
    assert '<details class="reasoning">' in page.text


def test_run_page_puts_the_diff_and_changed_tests_first(client: TestClient, store: RunStore,
                                                         tmp_path: Path) -> None:
    run_id = record_finished_run(store, tmp_path)
    client.get(f"/runs?token={TOKEN}")
    html = client.get(f"/runs/{run_id}").text
    assert html.index('id="diff"') < html.index('id="tests"') < html.index('id="events"')
    changed = html[html.index('id="tests-changed"'):html.index('id="tests-unchanged"')]
    assert "test_calc.py::test_add<" in changed and "test_add_floats" in changed
    assert changed.count("<tr>") == 3, "a header and the two tests that changed state"
    assert "test_more.py" not in changed and "test_sub" not in changed
    assert "<summary>191 unchanged: 189 passed · 2 skipped</summary>" in html


def test_compare_tests_orders_changes_for_a_reviewer() -> None:
    before = {"passed": False, "tests": {"a": "passed", "b": "failed", "c": "passed",
                                         "d": "skipped", "e": "passed", "g": "passed"}}
    after = {"passed": False, "tests": {"a": "failed", "b": "passed", "d": "skipped",
                                        "e": "passed", "f": "passed", "g": "passed"}}
    tests = compare_tests(before, after)
    assert tests.changed == [("a", "passed", "failed"), ("c", "passed", ""),
                             ("b", "failed", "passed"), ("f", "", "passed")]
    assert tests.unchanged == [("d", "skipped"), ("e", "passed"), ("g", "passed")]
    assert tests.unchanged_counts == [("passed", 2), ("skipped", 1)]
    baseline_only = compare_tests(before, None)  # the agent is still at work
    assert baseline_only.changed == [] and not baseline_only.compared
    assert len(baseline_only.unchanged) == 6


def test_the_pr_link_shape_redirects_to_the_run(client: TestClient, store: RunStore,
                                                tmp_path: Path) -> None:
    run_id = record_finished_run(store, tmp_path)
    client.get(f"/runs?token={TOKEN}")
    answer = client.get("/runs/octo/calc/1/1")
    assert answer.status_code == 303 and answer.headers["location"] == f"/runs/{run_id}"
    assert client.get("/runs/octo/calc/1/9").status_code == 404
    assert client.get("/runs/999").status_code == 404


def test_live_endpoint_sends_new_records(client: TestClient, store: RunStore) -> None:
    recorder = RunRecorder.start(store, repo="octo/live", issue=5, trigger="label", run_number=1)
    recorder.emit(started(test_command="pytest"))
    client.get(f"/runs?token={TOKEN}")
    first = client.get(f"/runs/{recorder.run_id}/live?after=0").json()
    assert first["status"] == "running" and not first["finished"] and first["next"] == 1
    recorder.emit(Feedback(round=1, content="<b>tests failed</b>"))
    second = client.get(f"/runs/{recorder.run_id}/live?after=1").json()
    assert second["next"] == 2 and "&lt;b&gt;tests failed" in second["html"]
    assert "Run started" not in second["html"]


def test_healthz_checks_the_database_and_metrics_come_from_runs(
        client: TestClient, store: RunStore, redis_server: RedisServer,
        tmp_path: Path) -> None:
    record_finished_run(store, tmp_path)
    RunRecorder.start(store, repo="octo/calc", issue=2, trigger="label", run_number=1)
    redis_server.client().rpush("frognano", "a", "b")
    health = client.get("/healthz").json()
    assert health["checks"]["database"]["ok"] is True
    text = client.get("/metrics").text
    for line in (
        'frognano_runs{status="passed"} 1.0',
        'frognano_runs{status="running"} 1.0',
        'frognano_run_outcomes_total{exit_reason="tests_passed",status="passed"} 1.0',
        'frognano_queue_depth{queue="frognano"} 2.0',
        'frognano_queue_depth{queue="frognano-control"} 0.0',
        'frognano_run_duration_seconds_bucket{le="60.0"} 1.0',
        'frognano_run_duration_seconds_bucket{le="30.0"} 0.0',
        'frognano_run_steps_sum 2.0',
        'frognano_run_tokens_per_second_sum 20.0',
        'frognano_prompt_tokens_sent_total 1850.0',
        'frognano_prompt_tokens_evaluated_total 950.0',
        'frognano_tool_calls_total{outcome="ok",tool="Bash"} 1.0',
        'frognano_run_store_up 1.0',
    ):
        assert line in text, line
    assert "frognano_sandbox_seconds_total 1.0" in text  # 0.4 + 0.2 + 0.4


# --- in a real browser --------------------------------------------------------------------


@pytest.fixture
def served(store: RunStore, redis_server: RedisServer, tmp_path: Path) -> Iterator[str]:
    app = make_app(store, redis_server, tmp_path, FROGNANO_DASHBOARD_TOKEN=TOKEN)
    with serve_app(app) as url:
        yield url


# The browser sees HTML only; the queries behind it run on both backends above.
BROWSER_BACKEND = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@BROWSER_BACKEND
def test_dashboard_in_chromium(served: str, browser: Any, store: RunStore,
                               tmp_path: Path) -> None:
    run_id = record_finished_run(store, tmp_path)
    RunRecorder.start(store, repo="octo/other", issue=9, trigger="retry", run_number=2)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    page.goto(f"{served}/runs?token={TOKEN}")
    assert page.url == f"{served}/runs", "the token leaves the address bar"
    assert page.locator("tr.run-row").count() == 2
    page.select_option("select[name=status]", "passed")
    page.click("button[type=submit]")
    page.wait_for_url("**/runs?*status=passed*")
    rows = page.locator("tr.run-row")
    assert rows.count() == 1
    assert "octo/calc" in rows.first.inner_text() and "tests_passed" in rows.first.inner_text()
    assert rows.first.locator("a", has_text="PR").get_attribute("href") == \
        "https://github.example/octo/calc/pull/1"

    rows.first.locator("a.run-link").click()
    page.wait_for_url(f"**/runs/{run_id}")
    reasoning = page.locator("details.reasoning").first
    assert reasoning.get_attribute("open") is None, "reasoning starts collapsed"
    assert not page.get_by_text("SECRET-REASONING").is_visible()
    reasoning.locator("summary").click()
    assert page.get_by_text("SECRET-REASONING").is_visible()

    output = page.locator("pre.tool-output").first.inner_text()
    assert "<script>window.__pwned = 1</script>" in output, "shown as text"
    assert page.evaluate("typeof window.__pwned") == "undefined", "and never run"
    assert page.locator("pre.tool-output script, pre.tool-output img").count() == 0
    assert "cat calc.py" in page.locator("pre.tool-args").first.inner_text()

    added = page.locator(".diff .diff-add").first
    assert added.inner_text() == "+    return a + b"
    assert added.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(218, 251, 225)"
    assert page.locator(".diff .diff-del").first.evaluate(
        "e => getComputedStyle(e).backgroundColor") == "rgb(255, 235, 233)"
    tests = page.locator("#tests").inner_text()
    assert "test_add" in tests and "failed" in tests and "passed" in tests
    assert page.locator("#tests-changed tbody tr").count() == 2
    assert page.locator("#tests-unchanged").get_attribute("open") is None, "folded"
    assert not page.locator("#tests-unchanged td", has_text="test_000").is_visible()
    top = {name: page.locator(name).bounding_box()["y"] for name in ("#diff", "#tests", "#events")}
    assert top["#diff"] < top["#tests"] < top["#events"], top
    screenshot = tmp_path / "run-page.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000
    if os.environ.get("FROGNANO_SCREENSHOT_DIR"):
        target = Path(os.environ["FROGNANO_SCREENSHOT_DIR"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, target / "run-page.png")

    page.goto(f"{served}/runs/octo/calc/1/1")  # the link in the PR body
    page.wait_for_url(f"**/runs/{run_id}")
    assert errors == [], errors


@BROWSER_BACKEND
def test_run_page_updates_live_in_chromium(served: str, browser: Any,
                                           store: RunStore) -> None:
    recorder = RunRecorder.start(store, repo="octo/live", issue=3, trigger="label", run_number=1)
    recorder.emit(started(test_command="pytest"))
    page = browser.new_page()
    page.goto(f"{served}/runs/{recorder.run_id}?token={TOKEN}")
    assert page.locator("#run-status").inner_text() == "running"
    recorder.emit(turn(1, content="looking", reasoning="hmm", calls=[
        ("Glob", {"pattern": "*.py"}, Observation("c", "Glob", "calc.py", 0.01))],
        prompt_tokens=10, evaluated=10, completion_tokens=7))
    page.wait_for_selector('section.event-turn[data-seq="2"]', timeout=10_000)
    assert page.locator("#run-steps").inner_text() == "1"
    recorder.finish("failed", outcome="failed")
    # The page's CSP forbids eval, so wait with locators rather than wait_for_function.
    from playwright.sync_api import expect

    expect(page.locator("#run-status")).to_have_text("failed", timeout=10_000)
    expect(page.locator("#live-note")).to_have_count(0, timeout=10_000)  # reloaded, done


# --- "Read this first": what no test run tells from a fix ---------------------------------

FLAGGED_LINE = '    if (a, b) == (2, 3): return 5  # <b>special</b>'


def record_judged_run(store: RunStore, tmp_path: Path, verdict: Verdict, issue: int = 7) -> int:
    """A finished run whose accepted change carries `verdict` (its flags, its evidence):
    judged in its round and in its result."""
    recorder = RunRecorder.start(store, repo="octo/calc", issue=issue, trigger="label",
                                 run_number=1)
    with Transcript(tmp_path / f"judged-{issue}-{len(verdict.evidence)}.jsonl") as transcript:
        events = Outputs(transcript, recorder)
        events.emit(started())
        events.emit(BaselineDone(tests=_tests(False, "failed")))
        final = _tests(True, "passed")
        events.emit(TestsJudged(round=1, exit_reason="agent", tests=final, verdict=verdict,
                                model_tests=None))
        done = finished(_tests(False, "failed"), final, diff=DIFF, steps=1)
        events.emit(RunFinished(result=dataclasses.replace(done.result, verdict=verdict)))
    recorder.finish("passed", outcome="pr_opened")
    assert recorder.run_id is not None
    return recorder.run_id


def record_flagged_run(store: RunStore, tmp_path: Path) -> int:
    """A run whose accepted change special-cases its failing test's inputs: the change
    scan's flags ride in the verdict (solver/verdict/change_flags.py)."""
    flags = [ChangeFlag("calc.py", 2, "test-literal", f"decides on 3, exactly as the "
                        f"failing test `tests/test_calc.py::test_add` uses: `{FLAGGED_LINE}`"),
             ChangeFlag("calc.py", 5, "runtime-probe", "reads `sys.modules`")]
    return record_judged_run(store, tmp_path, Verdict(accepted=True, read_first=flags))


def test_run_page_puts_read_this_first_above_the_diff(client: TestClient, store: RunStore,
                                                       tmp_path: Path) -> None:
    run_id = record_flagged_run(store, tmp_path)
    client.get(f"/runs?token={TOKEN}")
    html = client.get(f"/runs/{run_id}").text
    assert html.index('id="read-first"') < html.index('id="diff"') < html.index('id="tests"')
    section = html[html.index('id="read-first"'):html.index('id="diff"')]
    assert "<code>calc.py:2</code>" in section and "<code>calc.py:5</code>" in section
    assert "&lt;b&gt;special&lt;/b&gt;" in section and "<b>special" not in section
    plain = client.get(f"/runs/{record_finished_run(store, tmp_path)}").text
    assert 'id="read-first"' not in plain, "an unflagged run has no such section"


def test_run_page_shows_the_evidence_as_the_pr_does(client: TestClient, store: RunStore,
                                                    tmp_path: Path) -> None:
    client.get(f"/runs?token={TOKEN}")
    proof = TestEvidence("tests/test_calc.py::test_add<b>", REPRODUCES, REPOSITORY,
                         "failed at an assertion")
    shown = TestEvidence("tests/test_new.py::test_tail", NEW_FEATURE, MODEL,
                         "AttributeError on a name the change adds (tail)")
    verdict = Verdict(accepted=True, evidence=[proof, shown])
    html = client.get(f"/runs/{record_judged_run(store, tmp_path, verdict, 8)}").text
    section = html[html.index('id="evidence"'):html.index('id="diff"')]
    assert "<code>tests/test_calc.py::test_add&lt;b&gt;</code> fails on the base and passes " \
           "with the change" in section and "<b>" not in section
    assert "the repository&#39;s own test; on the base it failed at an assertion" in section
    assert "<code>tests/test_new.py::test_tail</code>: 🆕 fails on the base only because" \
        in section and 'id="unverified"' not in section
    nothing = TestEvidence("tests/test_new.py::test_zero", PASSES_ON_BASE, MODEL, "passed")
    verdict = Verdict(accepted=True, evidence=[nothing])
    html = client.get(f"/runs/{record_judged_run(store, tmp_path, verdict, 8)}").text
    section = html[html.index('id="evidence"'):html.index('id="diff"')]
    assert 'id="unverified"' in section and "the fix is unverified" in section
    assert "passes on the base too: shows nothing about the fix" in section


@BROWSER_BACKEND
def test_read_this_first_in_chromium(served: str, browser: Any, store: RunStore,
                                     tmp_path: Path) -> None:
    run_id = record_flagged_run(store, tmp_path)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{served}/runs/{run_id}?token={TOKEN}")
    section = page.locator("#read-first")
    assert section.is_visible()
    assert section.locator("li").count() == 2
    text = section.inner_text()
    assert "Read this first" in text and "calc.py:2" in text and "calc.py:5" in text
    assert "<b>special</b>" in text, "the model's code is shown as text"
    top = {name: page.locator(name).bounding_box()["y"]
           for name in ("#read-first", "#diff", "#tests")}
    assert top["#read-first"] < top["#diff"] < top["#tests"], top
    box = section.bounding_box()
    assert box["y"] < 900, "in the first screenful"
    assert section.evaluate("e => getComputedStyle(e).borderTopColor") == "rgb(154, 103, 0)"
    screenshot = tmp_path / "read-first.png"
    section.screenshot(path=str(screenshot))
    assert screenshot.stat().st_size > 5_000
    if os.environ.get("FROGNANO_SCREENSHOT_DIR"):
        target = Path(os.environ["FROGNANO_SCREENSHOT_DIR"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, target / "read-first.png")


# --- issue 22 §4: the run list's titles, a failed run's steps, the baseline folded ---------

# An issue title is the issue author's text: HTML, a bidi override, a script.
TITLE = 'Fix add: it <b>subtracts</b> \u202eevil ' + HOSTILE
BASELINE_OUTPUT = "BASELINE-OUTPUT " + "E   assert add(2, 3) == 5\n" * 60


def run_started(task: str) -> RunStarted:
    return RunStarted(model="scripted", test_command="pytest -q", setup_command=None,
                      setup_note="", limits={"max_steps": 100}, sampling=None, seed=None,
                      task=task)


def record_failed_run(store: RunStore, tmp_path: Path) -> int:
    """A run whose model looked, edited, and still left a test failing (max_rounds)."""
    recorder = RunRecorder.start(store, repo="octo/calc", issue=3, trigger="label", run_number=1)
    baseline = ran_tests({"tests/test_calc.py::test_add": "failed",
                          "tests/test_calc.py::test_sub": "passed"}, passed=False,
                         output=BASELINE_OUTPUT)
    final = ran_tests({"tests/test_calc.py::test_add": "failed",
                       "tests/test_calc.py::test_sub": "passed"}, passed=False,
                      output="AFTER-OUTPUT 1 failed")
    with Transcript(tmp_path / "failed.jsonl") as transcript:
        events = Outputs(transcript, recorder)
        events.emit(run_started(f"{TITLE}\n\nadd(2, 3) gives -1."))
        events.emit(BaselineDone(tests=baseline))
        events.emit(turn(1, reasoning="look first", calls=[
            ("Bash", {"command": "cat calc.py\nls"}, Observation("c1", "Bash", "def add", 0.1))],
            completion_tokens=31))
        events.emit(turn(2, calls=[
            ("Edit", {"path": "calc.py", "old": "a - b", "new": "a * b"},
             Observation("c2", "Edit", "edited", 0.1))], completion_tokens=27))
        events.emit(TestsJudged(round=1, exit_reason="agent", tests=final,
                                verdict=Verdict(accepted=False, reasons=["test_add fails"]),
                                model_tests=None))
        events.emit(finished(baseline, final, diff=DIFF.replace("a + b", "a * b"), steps=2,
                             exit_reason="max_rounds"))
    recorder.finish("failed", outcome="failed")
    assert recorder.run_id is not None
    return recorder.run_id


def record_solve_run(store: RunStore) -> int:
    """`frognano solve`'s run: its issue column holds the slug of the issue text."""
    recorder = RunRecorder.start(store, repo="/src/calc", issue="fix-the-adder-slug",
                                 trigger="solve", run_number=1)
    recorder.emit(run_started("Fix the adder\nIt subtracts."))
    recorder.finish("failed", outcome="failed")
    assert recorder.run_id is not None
    return recorder.run_id


def test_run_list_shows_the_issue_title_escaped_and_inert(client: TestClient, store: RunStore,
                                                          tmp_path: Path) -> None:
    record_failed_run(store, tmp_path)
    record_solve_run(store)
    RunRecorder.start(store, repo="octo/old", issue=9, trigger="label", run_number=1)  # no record
    client.get(f"/runs?token={TOKEN}")
    html = client.get("/runs").text
    table = html[html.index('id="runs"'):]
    assert "Fix add: it &lt;b&gt;subtracts&lt;/b&gt; \\x202eevil &lt;script&gt;" in table
    assert "<b>subtracts" not in table and "\u202e" not in table and "<script>" not in table
    assert "Fix the adder" in table and "fix-the-adder-slug" not in table, "the title, no slug"
    assert ">#3<" in table, "a GitHub issue keeps its number beside the title"
    rows = table.split('class="run-row"')[1:]
    assert len(rows) == 3 and '<td class="issue">9</td>' in rows[0], \
        "a run without a run record shows its issue"


def test_a_failed_run_page_leads_with_its_steps(client: TestClient, store: RunStore,
                                                tmp_path: Path) -> None:
    run_id = record_failed_run(store, tmp_path)
    client.get(f"/runs?token={TOKEN}")
    html = client.get(f"/runs/{run_id}").text
    assert html.index('id="steps"') < html.index('id="diff"') < html.index('id="events"')
    steps = html[html.index('id="steps"'):html.index('id="diff"')]
    assert "Bash: cat calc.py<" in steps and "Edit: calc.py<" in steps
    links = re.findall(r'href="#(event-\d+)"', steps)
    assert len(links) == 2 and all(f'id="{anchor}"' in html for anchor in links)
    assert "max_rounds" in steps
    assert "Fix add: it &lt;b&gt;subtracts" in html[:html.index('id="summary"')], "the title"
    baseline = html[html.index('class="event event-baseline"'):]
    baseline = baseline[:baseline.index("</section>")]
    assert "BASELINE-OUTPUT" in baseline and "<details open>" not in baseline, "folded"
    after = html[html.index('class="event event-tests"'):]
    assert "<details open><summary>output</summary><pre>AFTER-OUTPUT" in after
    passed = client.get(f"/runs/{record_finished_run(store, tmp_path)}").text
    assert 'id="steps"' not in passed, "a passed run leads with its diff"


# A best-of-2 run as frognano wrote it before issue 22 §1's rename (the old kinds, keys and
# exit reason), by hand: nothing of today's code made these.
OLD_RECORDS = [
    {"kind": "run", "task": "Old run\n\nbody", "model": "scripted", "test_command": "pytest",
     "limits": {"max_steps": 5, "max_attempts": 2}},
    {"kind": "attempt", "index": 1, "of": 2, "seed": 8},
    {"kind": "turn", "step": 1, "attempt": 1, "tool_calls": [{"name": "Bash", "arguments": {
        "command": "cat calc.py"}}], "usage": {"completion_tokens": 7},
     "seconds": {"model": 0.1, "tools": 0.1}, "observations": [], "finish_reason": "stop",
     "assistant": {"content": "", "reasoning": "", "raw_text": ""}, "parse_errors": []},
    {"kind": "tests", "attempt": 2, "exit_reason": "agent", "passed": False, "tests": {},
     "verdict": {"accepted": False, "reasons": ["OLD-REASON"]}},
    {"kind": "feedback", "attempt": 2, "content": "OLD-FEEDBACK"},
    {"kind": "attempts", "chosen": 1, "published": False, "attempts": [
        {"number": 1, "seed": 7, "outcome": "failed (max_attempts)", "steps": 3, "tokens": 9,
         "lines": 0, "files": 0},
        {"number": 2, "seed": 8, "outcome": "failed (max_attempts)", "steps": 1, "tokens": 7,
         "lines": 1, "files": 1}]},
    {"kind": "result", "exit_reason": "max_attempts", "tests_passed": False,
     "totals": {"attempts": 2, "steps": 1}},
]


def _old_events(html: str) -> str:
    return html[html.index('id="events"'):]


def test_runs_recorded_before_the_rename_render_in_todays_words(
        database_url: str, redis_server: RedisServer, tmp_path: Path) -> None:
    """A database of migration 0003 holding a run whose exit reason is `max_attempts`, its
    records in the database, and one whose records are in its transcript file only: both
    pages show rounds, candidates and `max_rounds`, and the run's number."""
    old = RunStore(database_url, migrate=False)
    upgrade_database(old.engine, "0003")
    with old.engine.begin() as connection:
        ids = [int(connection.execute(text(
            "INSERT INTO runs (repo, issue, trigger, attempt, status, exit_reason, created_at, "
            "updated_at, steps, attempts, prompt_tokens, prompt_tokens_evaluated, "
            "completion_tokens, prompt_seconds, completion_seconds, sandbox_seconds, "
            "transcript_path) VALUES ('octo/old', '6', 'label', 4, 'failed', 'max_attempts', "
            "0, 0, 1, 2, 0, 0, 0, 0, 0, 0, :path) RETURNING id"),
            {"path": path}).scalar_one())
            for path in (None, str(tmp_path / "old.jsonl"))]
        for seq, record in enumerate(OLD_RECORDS, start=1):
            connection.execute(text("INSERT INTO run_events (run_id, seq, kind, data) VALUES "
                                    "(:run, :seq, :kind, :data)"),
                               {"run": ids[0], "seq": seq, "kind": record["kind"],
                                "data": json.dumps(record)})
    old.close()
    (tmp_path / "old.jsonl").write_text("".join(json.dumps(r) + "\n" for r in OLD_RECORDS))
    store = RunStore(database_url)  # migrates to today's schema
    with TestClient(make_app(store, redis_server, tmp_path, FROGNANO_DASHBOARD_TOKEN=TOKEN),
                    follow_redirects=False) as client:
        client.get(f"/runs?token={TOKEN}")
        listed = client.get("/runs").text
        pages = [client.get(f"/runs/{run_id}").text for run_id in ids]
        by_number = client.get("/runs/octo/old/6/4")
    store.close()
    assert "max_rounds" in listed and "max_attempts" not in listed
    for html in pages:
        assert "· run 4<" in html and "max_attempts" not in html
        events = _old_events(html)
        assert "Result: max_rounds" in events and "Candidate 2 of 2" in events
        assert "Tests after round 2" in events and "Harness feedback after round 2" in events
        assert "· round 2 ·" in events, "the turn's round, counted from 1"
        assert "Reported: candidate 2" in events and "failed (max_rounds)" in events
        assert "max_rounds" in html[:html.index('id="events"')], "the headline's exit reason"
    assert by_number.status_code == 303, "the PR body's link, by the run's number"
    assert by_number.headers["location"] == f"/runs/{ids[1]}", "the newest record of it"


@BROWSER_BACKEND
def test_failed_run_and_run_list_in_chromium(served: str, browser: Any, store: RunStore,
                                             tmp_path: Path) -> None:
    run_id = record_failed_run(store, tmp_path)
    record_finished_run(store, tmp_path)
    record_solve_run(store)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{served}/runs?token={TOKEN}")
    titles = page.locator("tr.run-row .issue-title").all_inner_texts()
    assert titles == ["Fix the adder", "the issue", 'Fix add: it <b>subtracts</b> \\x202eevil '
                      + HOSTILE], titles
    assert page.evaluate("typeof window.__pwned") == "undefined", "the title never runs"
    assert page.locator("tr.run-row .issue-title b, tr.run-row img").count() == 0
    keep_screenshot(page, tmp_path / "run-list.png", full_page=True)

    page.locator("a.run-link", has_text=str(run_id)).click()
    page.wait_for_url(f"**/runs/{run_id}")
    assert page.locator("h1").inner_text() == titles[2], "the title heads the page, as text"
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("h1 b, h1 img, h1 script").count() == 0
    steps = page.locator("#steps")
    assert steps.bounding_box()["y"] < 900, "the steps are in the first screenful"
    assert steps.locator("tbody tr").count() == 2
    assert "Edit: calc.py" in steps.inner_text()
    baseline = page.locator("section.event-baseline details", has_text="output")
    assert baseline.get_attribute("open") is None
    assert not page.get_by_text("BASELINE-OUTPUT").is_visible(), "the baseline is folded"
    assert page.get_by_text("AFTER-OUTPUT").is_visible(), "the failing run's output is open"
    keep_screenshot(page, tmp_path / "failed-run.png", full_page=True)
    steps.locator("a", has_text="2").first.click()
    page.wait_for_url("**#event-*")
    edit = page.locator(page.url[page.url.index("#"):])
    assert "Edit" in edit.inner_text() and edit.bounding_box()["y"] < 900, "scrolled to it"

    page.locator("header nav a", has_text="Runs").click()  # every page links the runs
    page.wait_for_url(f"{served}/runs")
    page.goto(f"{served}/")  # the home page (no App yet: the setup's locked page)
    assert page.locator("a[href='/runs']").count() >= 1, "the home page links the runs"
    assert page.locator("header").evaluate(
        "e => getComputedStyle(e).backgroundColor") == "rgb(36, 41, 47)", "one look"
    keep_screenshot(page, tmp_path / "home.png", min_bytes=3_000)
    assert errors == [], errors


# --- the test services a run used (issue 23 §1) -------------------------------------------

SERVICES = [ServiceLine("postgresql", "15.18", "shuttle", ("DATABASE_URL", "PGHOST")),
            ServiceLine("redis", "7.0.15", "", ("REDIS_URL",))]


def record_services_run(store: RunStore, tmp_path: Path, *, finish: bool = True,
                        failed: bool = False) -> int:
    """A run of the shuttle app with PostgreSQL and Redis: going on (only its start is
    recorded), finished, or ended before the agent because a service did not start."""
    recorder = RunRecorder.start(store, repo="octo/shuttle", issue=3 + failed + 2 * finish,
                                 trigger="label", run_number=1)
    with Transcript(tmp_path / f"services-{failed}-{finish}.jsonl") as transcript:
        events = Outputs(transcript, recorder)
        if failed:
            events.emit(RunFinished(result=SolveResult(
                exit_reason="services_failed", tests_passed=False, diff="",
                test_command="pytest -q", baseline=None, final=None, rounds=0, steps=0,
                usage=Usage(), seconds=3.0, error="service `postgresql` version 16 is not "
                "available on this worker (installed: 15)",
                services=[ServiceLine("postgresql", "16", "shuttle", started=False),
                          ServiceLine("redis", "", started=False)])))
        else:
            events.emit(dataclasses.replace(started(), services=tuple(SERVICES)))
        if finish and not failed:
            done = finished(_tests(False, "failed"), _tests(True, "passed"), diff=DIFF)
            done.result.services = list(SERVICES)
            events.emit(done)
    if finish:
        recorder.finish("failed" if failed else "passed")
    assert recorder.run_id is not None
    return recorder.run_id


def test_run_page_names_the_services_while_running_and_after(client: TestClient,
                                                             store: RunStore,
                                                             tmp_path: Path) -> None:
    going = record_services_run(store, tmp_path, finish=False)
    failed = record_services_run(store, tmp_path, failed=True)
    client.get(f"/runs?token={TOKEN}")
    for run_id in (going, record_services_run(store, tmp_path)):
        page = client.get(f"/runs/{run_id}").text
        assert re.search(r"<dt>Services</dt><dd id=\"services\">.*PostgreSQL 15\.18 \(database "
                         r"shuttle\)</span>, <span[^>]*>Redis 7\.0\.15</span> .*fresh in every "
                         r"test run's sandbox", page), page[:3000]
    page = client.get(f"/runs/{failed}").text
    services = page.split('id="services">')[1].split("</dd>")[0]
    assert "PostgreSQL 16 (database shuttle)" in services and "Redis" in services
    assert "(asked for; did not start)" in services
    plain = record_finished_run(store, tmp_path)  # a run without services: no line
    assert "<dt>Services</dt>" not in client.get(f"/runs/{plain}").text


@BROWSER_BACKEND
def test_services_on_the_run_page_in_chromium(served: str, browser: Any, store: RunStore,
                                              tmp_path: Path) -> None:
    run_id = record_services_run(store, tmp_path)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{served}/runs/{run_id}?token={TOKEN}")
    services = page.locator("#services")
    assert services.inner_text() == ("PostgreSQL 15.18 (database shuttle), Redis 7.0.15 "
                                     "(fresh in every test run's sandbox)")
    assert services.bounding_box()["y"] < 900, "in the summary, in the first screenful"
    keep_screenshot(page.locator("#summary"), tmp_path / "run-services.png")
