"""runs.title: the issue's title (the first line of the run's task), which the run list
shows instead of the issue number or `frognano solve`'s slug; runs recorded before it get
theirs from their stored run record, and a run without one keeps none (NULL: the list
shows its issue)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TITLE_LENGTH = 300  # as runstore.store.task_title, frozen here as migrations are


def _title(task: object) -> str | None:
    if not isinstance(task, str):
        return None
    first = next((line.strip() for line in task.splitlines() if line.strip()), "")
    return first[:TITLE_LENGTH] or None


def upgrade() -> None:
    # A plain nullable column: SQLite adds it in place (no batch rebuild, whose drop of
    # `runs` would cascade to run_events).
    op.add_column("runs", sa.Column("title", sa.Text(), nullable=True))
    bind = op.get_bind()
    runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("title", sa.Text))
    events = sa.table("run_events", sa.column("run_id", sa.Integer),
                      sa.column("seq", sa.Integer), sa.column("kind", sa.String),
                      sa.column("data", sa.Text))
    titles: dict[int, str] = {}
    rows = bind.execute(sa.select(events.c.run_id, events.c.data)
                        .where(events.c.kind == "run").order_by(events.c.run_id, events.c.seq))
    for run_id, data in rows:
        try:
            title = _title(json.loads(data).get("task"))
        except (ValueError, AttributeError):
            continue
        if title:
            titles[run_id] = title  # the latest run record, as the store keeps it
    for run_id, title in titles.items():
        bind.execute(runs.update().where(runs.c.id == run_id).values(title=title))


def downgrade() -> None:
    # SQLite (3.35 on) drops a column in place; alembic's batch mode would rebuild `runs`.
    op.execute("ALTER TABLE runs DROP COLUMN title")
