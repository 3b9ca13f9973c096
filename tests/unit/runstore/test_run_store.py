"""Run records on SQLite and on a real PostgreSQL server (tests/support/postgres_server.py):
migrations, the API, recording from a run's events, several writing processes at once, and a
real `frognano solve` showing up as a run."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event, insert, inspect, text

from bot.logs import JsonFormatter, json_handler, run_context
from runstore.store import (
    PG_MIGRATION_LOCK,
    RunEvent,
    RunStore,
    default_database_url,
    downgrade_database,
    open_run_store,
    upgrade_database,
)
from solver.agent.run_events import (
    BaselineDone,
    Event,
    Observation,
    OnEvent,
    Outputs,
    RunAborted,
    TestsJudged,
    TurnDone,
)
from solver.agent.transcript import Transcript
from solver.models.base import Usage
from solver.models.scripted import final_answer, think_and_call
from solver.verdict.verdict import Verdict
from tests.conftest import make_repo
from tests.support.postgres_server import PostgresServer
from tests.support.run_events import finished, ran_tests, started, turn
from workers.run_recording import RunRecorder, status_for_outcome, tool_stats


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def test_migrations_apply_once(database_url: str) -> None:
    RunStore(database_url).ping()
    store = RunStore(database_url)  # reopening is a no-op upgrade
    with store.engine.connect() as connection:
        versions = connection.execute(text("SELECT version_num FROM alembic_version")).all()
        tables = set(inspect(connection).get_table_names())
        if connection.dialect.name == "sqlite":
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    assert [version for (version,) in versions] == ["0004"]
    assert {"runs", "run_events", "run_tool_stats"} <= tables
    store.close()


def _runs_before_0004() -> sa.Table:
    """`runs` as migrations 0001 to 0003 made it, under its old column names (the ORM of
    today names today's columns); its counters default to 0 as the ORM's did."""
    counters = ("steps", "attempts", "prompt_tokens", "prompt_tokens_evaluated",
                "completion_tokens", "prompt_seconds", "completion_seconds", "sandbox_seconds")
    return sa.Table(
        "runs", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True),
        *[sa.Column(name, sa.Text) for name in ("repo", "issue", "title", "trigger",
                                                 "status", "exit_reason")],
        sa.Column("attempt", sa.Integer), sa.Column("created_at", sa.Float),
        sa.Column("updated_at", sa.Float), *[sa.Column(name, sa.Float, default=0)
                                             for name in counters])


def _run_of_an_older_schema(store: RunStore, **columns: Any) -> int:
    """A run written as an older frognano did: only the columns its schema had."""
    values = {"trigger": "label", "attempt": 1, "status": "running", "created_at": 0.0,
              "updated_at": 0.0, **columns}
    with store.engine.begin() as connection:
        inserted = connection.execute(insert(_runs_before_0004()).values(**values))
        return int(inserted.inserted_primary_key[0])


def test_a_database_of_the_first_schema_upgrades_with_its_runs(database_url: str) -> None:
    store = RunStore(database_url, migrate=False)
    upgrade_database(store.engine, "0001")
    kept = _run_of_an_older_schema(store, repo="octo/calc", issue="1")
    upgrade_database(store.engine)
    checkout = "/" + "d" * 500
    longer = store.create_run(repo=checkout, issue="slug", trigger="solve", run_number=1)
    assert [run.repo for run in store.list_runs()] == [checkout, "octo/calc"]
    assert store.get_run(kept).repo == "octo/calc" and store.get_run(longer).repo == checkout
    store.close()


def test_the_issue_title_comes_from_the_run_record_old_rows_included(database_url: str
                                                                    ) -> None:
    """The run list shows the issue's title (issue 22 §4): the first line of the task the
    run record names. Runs recorded before the title column get theirs from their stored
    record; a run with no record keeps none (the list shows its issue)."""
    store = RunStore(database_url, migrate=False)
    upgrade_database(store.engine, "0002")
    old = _run_of_an_older_schema(store, repo="octo/calc", issue="4")
    with store.engine.begin() as connection:  # its run record, as stored back then
        connection.execute(insert(RunEvent.__table__).values(
            run_id=old, seq=1, kind="run", data=json.dumps({"kind": "run",
                                                            "task": "Fix add\n\nIt subtracts."})))
    bare = _run_of_an_older_schema(store, repo="octo/calc", issue="5")
    upgrade_database(store.engine)
    assert store.get_run(old).title == "Fix add"
    assert store.get_run(bare).title is None
    new = store.create_run(repo="/src/calc", issue="fix-add", trigger="solve", run_number=1)
    store.append_event(new, 1, {"kind": "turn", "task": "not a run record"})
    assert store.get_run(new).title is None
    store.append_event(new, 2, {"kind": "run", "task": "\n  " + "T" * 400 + "  \nbody"})
    assert store.get_run(new).title == "T" * 300
    store.append_event(new, 3, {"kind": "run", "task": "Retitled, then redelivered"})
    assert store.get_run(new).title == "Retitled, then redelivered"
    store.close()


def _indexes(store: RunStore) -> dict[str, list[str]]:
    with store.engine.connect() as connection:
        return {str(index["name"]): list(index["column_names"])
                for index in inspect(connection).get_indexes("runs")}


def test_runs_of_schema_0003_keep_their_numbers_under_the_new_names(database_url: str
                                                                    ) -> None:
    """Migration 0004 (issue 22 §1): `attempt` is the run number, `attempts` the rounds.
    Rows written at 0003 come back under the new names with their numbers, transcripts
    and an old exit reason in today's word; the downgrade gives the old names back."""
    store = RunStore(database_url, migrate=False)
    upgrade_database(store.engine, "0003")
    third = _run_of_an_older_schema(store, repo="octo/calc", issue="4", attempt=3,
                                    attempts=2, exit_reason="max_attempts", status="failed")
    first = _run_of_an_older_schema(store, repo="octo/calc", issue="4", attempt=1,
                                    attempts=1, exit_reason="tests_passed")
    with store.engine.begin() as connection:  # SQLite's table rebuild would drop these
        connection.execute(insert(RunEvent.__table__).values(
            run_id=third, seq=1, kind="turn", data=json.dumps({"kind": "turn", "step": 1})))
    upgrade_database(store.engine)
    runs = {run.id: run for run in store.list_runs()}
    assert (runs[third].run_number, runs[third].rounds, runs[third].exit_reason) == \
        (3, 2, "max_rounds")
    assert (runs[first].run_number, runs[first].rounds, runs[first].exit_reason) == \
        (1, 1, "tests_passed")
    assert store.events(third, 0) == [(1, {"kind": "turn", "step": 1})]
    found = store.find_run("octo/calc", 4, 3)
    assert found is not None and found.id == third
    assert store.next_run_number("octo/calc", 4) == 4
    indexes = _indexes(store)
    assert indexes["ix_runs_repo_issue_run_number"] == ["repo", "issue", "run_number"]
    assert "ix_runs_repo_issue_attempt" not in indexes

    downgrade_database(store.engine, "0003")
    with store.engine.connect() as connection:
        old = connection.execute(text("SELECT id, attempt, attempts, exit_reason FROM runs "
                                      "ORDER BY id")).all()
    assert [tuple(row) for row in old] == [(third, 3, 2, "max_attempts"),
                                           (first, 1, 1, "tests_passed")]
    assert _indexes(store)["ix_runs_repo_issue_attempt"] == ["repo", "issue", "attempt"]
    upgrade_database(store.engine)  # and up again, as a rolled-back release's return
    assert store.get_run(third).run_number == 3
    store.close()


def test_the_migration_lock_is_held_until_the_schema_is_committed(postgres_url: str) -> None:
    """The receiver and every worker migrate on start: the next migrator may only get in
    once this one's tables are visible to it, or it creates them again."""
    store = RunStore(postgres_url, migrate=False)
    prober = RunStore(postgres_url, migrate=False)
    free_at_commit: list[bool] = []

    @event.listens_for(store.engine, "commit")
    def _probe(_: object) -> None:
        with prober.engine.connect() as other:
            got = other.execute(text("SELECT pg_try_advisory_lock(:key)"),
                                {"key": PG_MIGRATION_LOCK}).scalar()
            if got:
                other.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": PG_MIGRATION_LOCK})
        free_at_commit.append(bool(got))

    upgrade_database(store.engine)
    upgrade_database(store.engine)  # and the no-op upgrade of an up-to-date database
    assert free_at_commit == [False, False]
    store.close()
    prober.close()


def test_long_values_behave_alike_on_both_backends(database_url: str) -> None:
    store = RunStore(database_url)
    checkout = "/" + "/".join(["d" * 60] * 12)  # solve records the checkout's absolute path
    run_id = store.create_run(repo=checkout, issue="slug", trigger="solve", run_number=1)
    assert store.get_run(run_id).repo == checkout
    assert store.find_run(checkout, "slug", 1).id == run_id
    with pytest.raises(ValueError, match="exit_reason is longer than 64 characters"):
        store.update_run(run_id, exit_reason="x" * 65)
    with pytest.raises(ValueError, match="issue is longer than 200 characters"):
        store.create_run(repo="o/r", issue="i" * 201, trigger="solve", run_number=1)
    store.close()


def test_default_url_lives_in_the_state_dir(tmp_path: Path) -> None:
    assert default_database_url(tmp_path) == f"sqlite:///{tmp_path.resolve()}/frognano.db"


def test_create_update_get_list_and_find(database_url: str, tmp_path: Path) -> None:
    store = RunStore(database_url)
    first = store.create_run(repo="octo/calc", issue=1, trigger="label", run_number=1,
                             transcript_path=tmp_path / "t.jsonl")
    second = store.create_run(repo="octo/other", issue=7, trigger="retry", run_number=2)
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


def test_a_redelivered_run_reuses_its_record(database_url: str) -> None:
    store = RunStore(database_url)
    first = store.start_run(repo="o/r", issue=3, trigger="label", run_number=1)
    store.update_run(first, status="error")
    again = store.start_run(repo="o/r", issue=3, trigger="label", run_number=1)
    assert again == first and store.get_run(first).status == "running"
    assert store.next_run_number("o/r", 3) == 2


def _events() -> list[Event]:
    bash = Observation("c1", "Bash", "ok", 0.5)
    # A Glob whose first match reads like an exception: only the runner's flag says
    # whether a call failed, never the text.
    glob = Observation("c3", "Glob", "KeyError: looks-like-an-error.txt", 0.2)
    failing = Observation("c2", "Read", "FileNotFoundError: nope", 0.1, failed=True)
    baseline = ran_tests({"t::a": "failed"}, passed=False, seconds=2.0)
    final = ran_tests({"t::a": "passed"}, passed=True, seconds=1.5)
    return [
        started(),
        BaselineDone(tests=baseline),
        turn(1, calls=[("Bash", {}, bash), ("Read", {}, failing)], prompt_tokens=100,
             evaluated=100, completion_tokens=20),
        turn(2, calls=[("Bash", {}, bash), ("Glob", {}, glob)], prompt_tokens=150,
             evaluated=30, completion_tokens=10),
        TestsJudged(round=1, exit_reason="agent", tests=final,
                    verdict=Verdict(accepted=True), model_tests=None),
        finished(baseline, final, diff="+x", steps=2, seconds=9.0, usage=Usage(
            prompt_tokens=250, prompt_tokens_evaluated=130, completion_tokens=30,
            prompt_seconds=0.5, completion_seconds=3.0)),
    ]


def test_recorder_fills_the_record_from_the_run_events(database_url: str,
                                                       tmp_path: Path) -> None:
    store = RunStore(database_url)
    recorder = RunRecorder.start(store, repo="o/r", issue=1, trigger="label", run_number=1)
    events = _events()
    with Transcript(tmp_path / "t.jsonl") as transcript:
        outputs = Outputs(transcript, recorder, OnEvent(lambda e: None))
        for event in events[:4]:
            outputs.emit(event)
        live = store.get_run(recorder.run_id)
        assert live.status == "running" and live.steps == 2 and live.completion_tokens == 30
        for event in events[4:]:
            outputs.emit(event)
    recorder.set_pr_url("https://example/pull/1")
    recorder.finish(status_for_outcome("pr_opened"), outcome="pr_opened")
    run = store.get_run(recorder.run_id)
    assert (run.status, run.outcome, run.exit_reason) == ("passed", "pr_opened", "tests_passed")
    assert (run.model, run.test_command, run.seconds) == ("scripted", "pytest -q", 9.0)
    assert (run.prompt_tokens, run.prompt_tokens_evaluated) == (250, 130)
    assert run.sandbox_seconds == pytest.approx(0.5 + 0.1 + 0.5 + 0.2 + 2.0 + 1.5)
    assert run.tests("after")["passed"] is True and run.pr_url == "https://example/pull/1"
    assert [record["kind"] for _, record in store.events(run.id)] == [
        "run", "baseline", "turn", "turn", "tests", "result"]
    assert [seq for seq, _ in store.events(run.id, after=4)] == [5, 6]
    lines = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert lines == [record for _, record in store.events(run.id)], "the same records"
    turns = [e for e in events if isinstance(e, TurnDone)]
    assert tool_stats(turns) == {("Bash", "ok"): (2, 1.0), ("Read", "error"): (1, 0.1),
                                 ("Glob", "ok"): (1, 0.2)}


def test_a_broken_database_never_stops_the_run(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = RunStore(_url(tmp_path))
    recorder = RunRecorder.start(store, repo="o/r", issue=1, trigger="label", run_number=1)

    def broken(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("database is locked")

    for name in ("append_event", "update_run", "add_progress", "set_tool_stats"):
        monkeypatch.setattr(store, name, broken)
    with Transcript(tmp_path / "t.jsonl") as transcript:
        outputs = Outputs(transcript, recorder)
        outputs.emit(started())
        outputs.emit(RunAborted(exit_reason="bad_input", error="no"))
    recorder.finish("passed")
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 2
    assert RunRecorder.start(None, repo="o/r", issue=1, trigger="x").run_id is None


def _writer(url: str, name: str, count: int, ready: Any) -> None:
    ready.wait()  # open at the same moment, so the migrations race
    store = RunStore(url)
    for number in range(count):
        run_id = store.create_run(repo=f"o/{name}", issue=number, trigger="label", run_number=1)
        for seq in range(1, 4):
            store.append_event(run_id, seq, {"kind": "turn", "step": seq})
            store.add_progress(run_id, steps=seq, completion_tokens=5)
        store.update_run(run_id, status="passed", seconds=1.0)


def test_two_processes_write_concurrently(database_url: str) -> None:
    """Both open a fresh database, so their migrations race too."""
    url = database_url
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(2)
    writers = [context.Process(target=_writer, args=(url, name, 40, ready))
               for name in ("a", "b")]
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


def test_a_wrong_password_on_a_real_server_is_named_not_shown(
        postgres_server: PostgresServer) -> None:
    from runstore.store import RunStoreUnavailable

    url = postgres_server.url().replace(postgres_server.password, "wrong-s3cret")
    with pytest.raises(RunStoreUnavailable) as failure:
        open_run_store(url)
    assert "password authentication failed" in str(failure.value)
    assert "wrong-s3cret" not in str(failure.value)


def test_frognano_solve_is_recorded(database_url: str, tmp_path: Path) -> None:
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
    if database_url.startswith("postgresql"):
        env["FROGNANO_DATABASE_URL"] = database_url  # the shared, multi-host setup
    else:
        env.pop("FROGNANO_DATABASE_URL", None)
        database_url = default_database_url(state)  # the default: a file in the state dir
    done = subprocess.run(
        [sys.executable, "-m", "frognano", "solve", str(repo), "--issue", "add() subtracts",
         "--model", f"scripted:{script}", "--sandbox", "unsafe-local",
         "--test-cmd", f"{sys.executable} -m pytest -q -p no:cacheprovider"],
        env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    store = RunStore(database_url)
    (run,) = store.list_runs()
    assert (run.repo, run.issue, run.trigger, run.run_number) == (
        str(repo.resolve()), "add-subtracts", "solve", 1)
    assert run.status == "passed" and run.exit_reason == "tests_passed" and run.steps == 2
    assert run.tests("before")["passed"] is False and run.tests("after")["passed"] is True
    assert Path(run.transcript_path).is_file()
    assert store.get_run(run.id).model and store.has_events(run.id)
