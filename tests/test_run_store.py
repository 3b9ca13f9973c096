"""Run records on SQLite: migrations, the API, recording from a transcript, several writing
processes at once, and a real `frognano solve` showing up as a run."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bot.logs import JsonFormatter, json_handler, run_context
from runstore.store import RunStore, default_database_url, open_run_store
from tests.conftest import make_repo
from workers.models.scripted import final_answer, think_and_call
from workers.run_recording import RunRecorder, status_for_outcome, tool_stats


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def test_migrations_apply_once_and_enable_wal(tmp_path: Path) -> None:
    RunStore(_url(tmp_path)).ping()
    RunStore(_url(tmp_path)).ping()  # reopening is a no-op upgrade
    db = sqlite3.connect(tmp_path / "runs.db")
    assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [("0001",)]
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "run_events", "run_tool_stats"} <= tables
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_default_url_lives_in_the_state_dir(tmp_path: Path) -> None:
    assert default_database_url(tmp_path) == f"sqlite:///{tmp_path.resolve()}/frognano.db"


def test_create_update_get_list_and_find(tmp_path: Path) -> None:
    store = RunStore(_url(tmp_path))
    first = store.create_run(repo="octo/calc", issue=1, trigger="label", attempt=1,
                             transcript_path=tmp_path / "t.jsonl")
    second = store.create_run(repo="octo/other", issue=7, trigger="retry", attempt=2)
    store.update_run(first, status="passed", exit_reason="tests_passed", seconds=12.5,
                     tests_before={"passed": False, "tests": {"t::a": "failed"}},
                     tests_after={"passed": True, "tests": {"t::a": "passed"}},
                     pr_url="https://github.example/octo/calc/pull/1")
    run = store.get_run(first)
    assert run is not None and run.status == "passed" and run.finished
    assert run.finished_at is not None and run.duration == 12.5
    assert run.tests("after") == {"passed": True, "tests": {"t::a": "passed"}}
    assert run.transcript_path == str(tmp_path / "t.jsonl")
    assert [r.id for r in store.list_runs()] == [second, first]
    assert [r.id for r in store.list_runs(repo="octo/calc")] == [first]
    assert [r.id for r in store.list_runs(status="running")] == [second]
    assert [r.id for r in store.list_runs(issue=7)] == [second]
    assert store.find_run("octo/calc", "1", 1).id == first
    assert store.find_run("octo/calc", 1, 2) is None
    assert store.repos() == ["octo/calc", "octo/other"]
    with pytest.raises(ValueError, match="unknown run status"):
        store.update_run(first, status="done")
    with pytest.raises(ValueError, match="not run record fields"):
        store.update_run(first, colour="green")


def test_a_redelivered_attempt_reuses_its_record(tmp_path: Path) -> None:
    store = RunStore(_url(tmp_path))
    first = store.start_run(repo="o/r", issue=3, trigger="label", attempt=1)
    store.update_run(first, status="error")
    again = store.start_run(repo="o/r", issue=3, trigger="label", attempt=1)
    assert again == first and store.get_run(first).status == "running"
    assert store.next_attempt("o/r", 3) == 2


def _records() -> list[dict]:
    observation = {"id": "c1", "name": "Bash", "output": "ok", "seconds": 0.5}
    failing = {"id": "c2", "name": "Read", "output": "FileNotFoundError: nope", "seconds": 0.1}
    return [
        ("run", {"model": "scripted", "test_command": "pytest -q"}),
        ("baseline", {"passed": False, "seconds": 2.0, "tests": {"t::a": "failed"}}),
        ("turn", {"step": 1, "attempt": 0, "usage": {"prompt_tokens": 100,
                  "prompt_tokens_evaluated": 100, "completion_tokens": 20},
                  "observations": [observation, failing]}),
        ("turn", {"step": 2, "attempt": 0, "usage": {"prompt_tokens": 150,
                  "prompt_tokens_evaluated": 30, "completion_tokens": 10},
                  "observations": [observation]}),
        ("tests", {"attempt": 1, "passed": True, "seconds": 1.5, "tests": {"t::a": "passed"}}),
        ("result", {"exit_reason": "tests_passed", "tests_passed": True,
                    "baseline": {"passed": False}, "final": {"passed": True}, "diff": "+x",
                    "totals": {"attempts": 1, "steps": 2, "seconds": 9.0, "usage": {
                        "prompt_tokens": 250, "prompt_tokens_evaluated": 130,
                        "completion_tokens": 30, "prompt_seconds": 0.5,
                        "completion_seconds": 3.0}}, "error": ""}),
    ]


def test_recorder_fills_the_record_from_the_transcript(tmp_path: Path) -> None:
    store = RunStore(_url(tmp_path))
    recorder = RunRecorder.start(store, repo="o/r", issue=1, trigger="label", attempt=1)
    with recorder.transcript(tmp_path / "t.jsonl") as transcript:
        for kind, fields in _records()[:4]:
            transcript.write(kind, **fields)
        live = store.get_run(recorder.run_id)
        assert live.status == "running" and live.steps == 2 and live.completion_tokens == 30
        for kind, fields in _records()[4:]:
            transcript.write(kind, **fields)
    recorder.set_pr_url("https://example/pull/1")
    recorder.finish(status_for_outcome("pr_opened"), outcome="pr_opened")
    run = store.get_run(recorder.run_id)
    assert (run.status, run.outcome, run.exit_reason) == ("passed", "pr_opened", "tests_passed")
    assert (run.model, run.test_command, run.seconds) == ("scripted", "pytest -q", 9.0)
    assert (run.prompt_tokens, run.prompt_tokens_evaluated) == (250, 130)
    assert run.sandbox_seconds == pytest.approx(0.5 + 0.1 + 0.5 + 2.0 + 1.5)
    assert run.tests("after") == {"passed": True} and run.pr_url == "https://example/pull/1"
    assert [record["kind"] for _, record in store.events(run.id)] == [
        "run", "baseline", "turn", "turn", "tests", "result"]
    assert [seq for seq, _ in store.events(run.id, after=4)] == [5, 6]
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 6, "the file is unchanged"
    assert tool_stats([{"kind": k, **f} for k, f in _records()]) == {
        ("Bash", "ok"): (2, 1.0), ("Read", "error"): (1, 0.1)}


def test_a_broken_database_never_stops_the_run(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = RunStore(_url(tmp_path))
    recorder = RunRecorder.start(store, repo="o/r", issue=1, trigger="label", attempt=1)

    def broken(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("database is locked")

    for name in ("append_event", "update_run", "add_progress", "set_tool_stats"):
        monkeypatch.setattr(store, name, broken)
    with recorder.transcript(tmp_path / "t.jsonl") as transcript:
        transcript.write("run", model="m")
        transcript.write("result", exit_reason="agent")
    recorder.finish("passed")
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 2
    assert RunRecorder.start(None, repo="o/r", issue=1, trigger="x").run_id is None


def _writer(url: str, name: str, count: int) -> None:
    store = RunStore(url)  # each process migrates on open, racing the other
    for number in range(count):
        run_id = store.create_run(repo=f"o/{name}", issue=number, trigger="label", attempt=1)
        for seq in range(1, 4):
            store.append_event(run_id, seq, {"kind": "turn", "step": seq})
            store.add_progress(run_id, steps=seq, completion_tokens=5)
        store.update_run(run_id, status="passed", seconds=1.0)


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    url = _url(tmp_path)
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_writer, args=(url, name, 40)) for name in ("a", "b")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
    assert [writer.exitcode for writer in writers] == [0, 0]
    store = RunStore(url)
    runs = store.list_runs(limit=1000)
    assert len(runs) == 80
    assert all(run.status == "passed" and run.completion_tokens == 15 for run in runs)
    assert all(len(store.events(run.id)) == 3 for run in runs[:5])


def test_run_context_puts_the_run_id_in_json_logs(tmp_path: Path) -> None:
    import io

    stream = io.StringIO()
    logger = logging.getLogger("frognano.test.runlog")
    logger.addHandler(json_handler(stream))
    logger.propagate = False
    try:
        with run_context(42):
            logger.warning("inside")
        logger.warning("outside")
    finally:
        logger.handlers.clear()
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["run_id"] == 42 and "run_id" not in outside
    assert isinstance(JsonFormatter(), logging.Formatter)


def test_open_run_store_hides_the_password(tmp_path: Path) -> None:
    from runstore.store import RunStoreUnavailable

    with pytest.raises(RunStoreUnavailable) as failure:
        open_run_store("postgresql://frog:s3cret@127.0.0.1:1/frognano")
    assert "s3cret" not in str(failure.value) and "FROGNANO_DATABASE_URL" in str(failure.value)


def test_frognano_solve_is_recorded(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "calc", template="calc_repo")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        think_and_call("add uses minus.", "Edit", file_path="calc.py",
                       old_string="return a - b", new_string="return a + b"),
        final_answer("Fixed."),
    ]))
    state = tmp_path / "state"
    env = {**os.environ, "FROGNANO_STATE_DIR": str(state),
           "FROGNANO_WORK_DIR": str(tmp_path / "work")}
    done = subprocess.run(
        [sys.executable, "-m", "frognano", "solve", str(repo), "--issue", "add() subtracts",
         "--model", f"scripted:{script}", "--sandbox", "unsafe-local",
         "--test-cmd", f"{sys.executable} -m pytest -q -p no:cacheprovider"],
        env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    store = RunStore(default_database_url(state))
    (run,) = store.list_runs()
    assert (run.repo, run.issue, run.trigger, run.attempt) == (
        str(repo.resolve()), "add-subtracts", "solve", 1)
    assert run.status == "passed" and run.exit_reason == "tests_passed" and run.steps == 2
    assert run.tests("before")["passed"] is False and run.tests("after")["passed"] is True
    assert Path(run.transcript_path).is_file()
    assert store.get_run(run.id).model and store.has_events(run.id)
