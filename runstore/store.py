"""Run records: one row per run (pipeline or `frognano solve`), its transcript events and
its tool-call totals, in SQLite by default or PostgreSQL (`FROGNANO_DATABASE_URL`).

Several processes write the same database (the receiver reads, workers write), so SQLite
runs in WAL mode with a busy timeout and takes the write lock when a transaction begins.
The schema is owned by the Alembic migrations in `runstore/migrations/`; `RunStore` applies
them when it opens the database.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import (
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    create_engine,
    delete,
    event,
    func,
    select,
    text,
    update,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

RUN_STATUSES = ("queued", "running", "passed", "failed", "error", "superseded")
FINISHED_STATUSES = frozenset({"passed", "failed", "error", "superseded"})
SQLITE_BUSY_TIMEOUT_MS = 30_000
TITLE_LENGTH = 300  # an issue title is at most 256 characters on GitHub
MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# An arbitrary constant: one migrator at a time per PostgreSQL database (migrations/env.py).
PG_MIGRATION_LOCK = 0x46524F47


def default_database_url(state_dir: Path) -> str:
    return f"sqlite:///{Path(state_dir).expanduser().resolve() / 'frognano.db'}"


class Base(DeclarativeBase):
    pass


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo: Mapped[str] = mapped_column(Text)  # owner/name, or a local path for solve
    issue: Mapped[str] = mapped_column(String(200))  # the issue number, or solve's slug
    # The issue's title: untrusted text (rendered escaped and inert); None for a run
    # recorded before its run record (or before migration 0003 without one).
    title: Mapped[str | None] = mapped_column(Text)
    trigger: Mapped[str] = mapped_column(String(32))  # label, retry, solve
    # The Nth run of this repo and issue, counted from 1 (the dashboard's "run N").
    run_number: Mapped[int] = mapped_column(Integer, default=1)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    outcome: Mapped[str | None] = mapped_column(String(32))  # pipeline outcome, e.g. pr_opened
    exit_reason: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(400))
    test_command: Mapped[str | None] = mapped_column(Text)
    delivery_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)  # Unix seconds: no time zone trouble
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    seconds: Mapped[float | None] = mapped_column(Float)
    steps: Mapped[int] = mapped_column(Integer, default=0)
    rounds: Mapped[int] = mapped_column(Integer, default=0)  # agent rounds (verdict runs)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)  # sent
    prompt_tokens_evaluated: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    prompt_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    completion_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    sandbox_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    tests_before: Mapped[str | None] = mapped_column(Text)  # JSON of TestVerdict.to_dict()
    tests_after: Mapped[str | None] = mapped_column(Text)
    pr_url: Mapped[str | None] = mapped_column(String(500))
    transcript_path: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("ix_runs_repo_issue_run_number", "repo", "issue", "run_number"),
        Index("ix_runs_status", "status"),
        Index("ix_runs_created_at", "created_at"),
    )

    @property
    def duration(self) -> float | None:
        if self.seconds is not None:
            return self.seconds
        if self.started_at is None:
            return None
        return (self.finished_at or time.time()) - self.started_at

    @property
    def tokens(self) -> int:
        return self.completion_tokens

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    def tests(self, which: str) -> dict[str, Any] | None:
        raw = self.tests_before if which == "before" else self.tests_after
        return json.loads(raw) if raw else None


class RunEvent(Base):
    """One transcript record, so a dashboard on another host can show the run live."""

    __tablename__ = "run_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    data: Mapped[str] = mapped_column(Text)  # the record as JSON

    __table_args__ = (Index("ix_run_events_run_seq", "run_id", "seq"),)


class ToolStat(Base):
    """Tool calls of one run by tool and outcome (ok, error, sandbox_error)."""

    __tablename__ = "run_tool_stats"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"),
                                        primary_key=True)
    tool: Mapped[str] = mapped_column(String(64), primary_key=True)
    outcome: Mapped[str] = mapped_column(String(16), primary_key=True)
    calls: Mapped[int] = mapped_column(Integer, default=0)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)


_UPDATABLE = frozenset(c.key for c in Run.__table__.columns) - {"id", "created_at"}
# PostgreSQL refuses a longer value, SQLite keeps it: checked here so both behave alike.
_MAX_LENGTH = {c.key: c.type.length for c in Run.__table__.columns
               if isinstance(c.type, String) and c.type.length}


def _sqlite_engine(url: str) -> Engine:
    path = make_url(url).database
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None hands transaction control to the "begin" hook below: pysqlite's
    # own deferred BEGIN lets two writers deadlock on the lock upgrade, which busy_timeout
    # cannot resolve; BEGIN IMMEDIATE waits for the write lock up front instead.
    engine = create_engine(url, connect_args={"isolation_level": None, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; durable at checkpoints
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def normalized_url(url: str) -> str:
    """Plain postgresql:// URLs get psycopg 3, the driver we ship (SQLAlchemy would pick
    psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def build_engine(url: str) -> Engine:
    url = normalized_url(url)
    if url.startswith("sqlite"):
        return _sqlite_engine(url)
    return create_engine(url, pool_pre_ping=True)


@contextmanager
def _migration_lock(url: str) -> Iterator[None]:
    """Serialise migrations of one SQLite file across processes (PostgreSQL uses an
    advisory lock in env.py): the receiver and workers all upgrade on startup."""
    path = make_url(url).database if url.startswith("sqlite") else None
    if not path or path == ":memory:":
        yield
        return
    with open(f"{path}.migrate.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def upgrade_database(engine: Engine, revision: str = "head") -> None:
    """Apply the packaged migrations; no alembic.ini needed."""
    _migrate(engine, "upgrade", revision)


def downgrade_database(engine: Engine, revision: str) -> None:
    """Undo the packaged migrations down to `revision`, for going back to an older release."""
    _migrate(engine, "downgrade", revision)


def _migrate(engine: Engine, direction: Literal["upgrade", "downgrade"], revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with _migration_lock(str(engine.url)), engine.connect() as connection:
        config.attributes["connection"] = connection
        getattr(command, direction)(config, revision)
        connection.commit()


class RunStoreUnavailable(RuntimeError):
    """The database cannot be opened or migrated; the message says which and why."""


def open_run_store(database_url: str) -> RunStore:
    """A migrated store, or RunStoreUnavailable with the URL shown without its password."""
    try:
        return RunStore(database_url)
    except Exception as exc:
        shown = make_url(normalized_url(database_url)).render_as_string(hide_password=True)
        raise RunStoreUnavailable(f"cannot open the run database {shown} "
                                  f"({type(exc).__name__}: {exc}); check FROGNANO_DATABASE_URL "
                                  "or FROGNANO_STATE_DIR") from exc


class RunStore:
    """The run records API. Safe to share between threads; a forked child gets fresh
    connections (Celery's prefork pool forks after the store is built)."""

    def __init__(self, database_url: str, *, migrate: bool = True) -> None:
        self.url = database_url
        self._lock = threading.Lock()
        self._pid = -1
        self._engine: Engine | None = None
        self._sessions: sessionmaker[Session] | None = None
        if migrate:
            upgrade_database(self.engine)

    @property
    def engine(self) -> Engine:
        with self._lock:
            if self._engine is None or self._pid != os.getpid():
                if self._engine is not None:
                    self._engine.dispose(close=False)  # the parent's connections stay its own
                self._engine = build_engine(self.url)
                self._sessions = sessionmaker(self._engine, expire_on_commit=False)
                self._pid = os.getpid()
            return self._engine

    @contextmanager
    def session(self) -> Iterator[Session]:
        self.engine  # noqa: B018 (builds the session factory in this process)
        assert self._sessions is not None
        with self._sessions.begin() as session:
            yield session

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def ping(self) -> None:
        """Raise when the database cannot answer a trivial query (the /healthz probe)."""
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    # --- runs -----------------------------------------------------------------------------

    def create_run(self, *, repo: str, issue: str | int, trigger: str, run_number: int,
                   status: str = "running", **fields: Any) -> int:
        _check(status, {"repo": repo, "issue": str(issue), "trigger": trigger, **fields})
        now = time.time()
        run = Run(repo=repo, issue=str(issue), trigger=trigger, run_number=run_number,
                  status=status, created_at=now, updated_at=now,
                  started_at=now if status == "running" else None, **_encoded(fields))
        with self.session() as session:
            session.add(run)
            session.flush()
            return run.id

    def start_run(self, *, repo: str, issue: str | int, trigger: str, run_number: int,
                  **fields: Any) -> int:
        """Mark a pipeline run as running, reusing the record of the same run number when
        the task was redelivered or requeued, so one run stays one row."""
        existing = self.find_run(repo, issue, run_number)
        if existing is None:
            return self.create_run(repo=repo, issue=issue, trigger=trigger,
                                   run_number=run_number, **fields)
        self.update_run(existing.id, status="running", started_at=time.time(),
                        finished_at=None, trigger=trigger, **fields)
        return existing.id

    def next_run_number(self, repo: str, issue: str | int) -> int:
        with self.session() as session:
            latest = session.scalar(select(func.max(Run.run_number)).where(
                Run.repo == repo, Run.issue == str(issue)))
        return (latest or 0) + 1

    def update_run(self, run_id: int, **fields: Any) -> None:
        """Set any column but id and created_at; test results may be given as dicts."""
        _check(fields.get("status", "running"), fields)
        values = {**_encoded(fields), "updated_at": time.time()}
        if fields.get("status") in FINISHED_STATUSES and "finished_at" not in fields:
            values["finished_at"] = values["updated_at"]
        with self.session() as session:
            session.execute(update(Run).where(Run.id == run_id).values(**values))

    def add_progress(self, run_id: int, *, steps: int, prompt_tokens: int = 0,
                     prompt_tokens_evaluated: int = 0, completion_tokens: int = 0) -> None:
        """Live totals while a run goes (one turn's usage added)."""
        with self.session() as session:
            session.execute(update(Run).where(Run.id == run_id).values(
                steps=steps, updated_at=time.time(),
                prompt_tokens=Run.prompt_tokens + prompt_tokens,
                prompt_tokens_evaluated=Run.prompt_tokens_evaluated + prompt_tokens_evaluated,
                completion_tokens=Run.completion_tokens + completion_tokens))

    def get_run(self, run_id: int) -> Run | None:
        with self.session() as session:
            return session.get(Run, run_id)

    def find_run(self, repo: str, issue: str | int, run_number: int) -> Run | None:
        """The newest record of this run number (the URL shape the PR body links)."""
        with self.session() as session:
            return session.scalars(select(Run).where(
                Run.repo == repo, Run.issue == str(issue), Run.run_number == run_number,
            ).order_by(Run.id.desc()).limit(1)).first()

    def list_runs(self, *, repo: str | None = None, status: str | None = None,
                  issue: str | int | None = None, limit: int = 100,
                  offset: int = 0) -> list[Run]:
        query = select(Run).order_by(Run.id.desc()).limit(limit).offset(offset)
        if repo:
            query = query.where(Run.repo == repo)
        if status:
            query = query.where(Run.status == status)
        if issue is not None and str(issue) != "":
            query = query.where(Run.issue == str(issue))
        with self.session() as session:
            return list(session.scalars(query))

    def repos(self) -> list[str]:
        with self.session() as session:
            return list(session.scalars(select(Run.repo).distinct().order_by(Run.repo)))

    # --- transcript events and tool totals -------------------------------------------------

    def append_event(self, run_id: int, seq: int, record: dict[str, Any]) -> None:
        """Store one transcript record; the run record (kind "run") names the run's title,
        so every writer of runs (the worker, `frognano solve`) records it alike."""
        data = json.dumps(record, ensure_ascii=False, default=str)
        title = task_title(record.get("task")) if record.get("kind") == "run" else None
        with self.session() as session:
            session.add(RunEvent(run_id=run_id, seq=seq, kind=str(record.get("kind")),
                                 data=data))
            if title:
                session.execute(update(Run).where(Run.id == run_id).values(title=title))

    def clear_events(self, run_id: int) -> None:
        with self.session() as session:
            session.execute(delete(RunEvent).where(RunEvent.run_id == run_id))
            session.execute(delete(ToolStat).where(ToolStat.run_id == run_id))

    def has_events(self, run_id: int) -> bool:
        with self.session() as session:
            return session.scalar(select(RunEvent.id).where(
                RunEvent.run_id == run_id).limit(1)) is not None

    def events(self, run_id: int, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """(seq, record) pairs with seq > after, in order."""
        with self.session() as session:
            rows = session.execute(select(RunEvent.seq, RunEvent.data).where(
                RunEvent.run_id == run_id, RunEvent.seq > after).order_by(RunEvent.seq))
            return [(seq, json.loads(data)) for seq, data in rows]

    def set_tool_stats(self, run_id: int,
                       stats: dict[tuple[str, str], tuple[int, float]]) -> None:
        """(tool, outcome) → (calls, seconds), replacing what the run had."""
        with self.session() as session:
            session.execute(delete(ToolStat).where(ToolStat.run_id == run_id))
            session.add_all(ToolStat(run_id=run_id, tool=tool[:64], outcome=outcome,
                                     calls=calls, seconds=seconds)
                            for (tool, outcome), (calls, seconds) in stats.items())


def task_title(task: object) -> str | None:
    """The issue's title as a run's task starts with it (the worker's task is the title,
    a blank line, the body; solve's is the issue text): its first non-blank line."""
    if not isinstance(task, str):
        return None
    first = next((line.strip() for line in task.splitlines() if line.strip()), "")
    return first[:TITLE_LENGTH] or None


def _check(status: str, fields: dict[str, Any]) -> None:
    if status not in RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}; one of {', '.join(RUN_STATUSES)}")
    unknown = set(fields) - _UPDATABLE
    if unknown:
        raise ValueError(f"not run record fields: {', '.join(sorted(unknown))}")
    for key, value in fields.items():
        limit = _MAX_LENGTH.get(key)
        if limit and isinstance(value, str) and len(value) > limit:
            raise ValueError(f"{key} is longer than {limit} characters")


def _encoded(fields: dict[str, Any]) -> dict[str, Any]:
    values = dict(fields)
    for key in ("tests_before", "tests_after"):
        if isinstance(values.get(key), dict):
            values[key] = json.dumps(values[key], ensure_ascii=False, default=str)
    if isinstance(values.get("transcript_path"), Path):
        values["transcript_path"] = str(values["transcript_path"])
    return values
