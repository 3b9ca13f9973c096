"""runs.attempt -> runs.run_number (the Nth run of one issue) and runs.attempts ->
runs.rounds (the agent rounds, each ended by a verdict run), with their index: one old
word held both meanings (issue 22 §1). Old rows keep their numbers; an old exit reason
`max_attempts` becomes `max_rounds`, today's name of the same end.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# (old, new), frozen here as migrations are.
COLUMNS = (("attempt", "run_number"), ("attempts", "rounds"))
INDEXES = (("ix_runs_repo_issue_attempt", "attempt"),
           ("ix_runs_repo_issue_run_number", "run_number"))
EXIT_REASONS = ("max_attempts", "max_rounds")


def _rename(columns: tuple[tuple[str, str], ...], index_from: tuple[str, str],
            index_to: tuple[str, str], reasons: tuple[str, str]) -> None:
    # In place on both backends (SQLite 3.25 on renames a column with ALTER TABLE):
    # alembic's batch mode would rebuild `runs`, whose drop cascades to run_events.
    op.drop_index(index_from[0], "runs")
    for old, new in columns:
        op.execute(f"ALTER TABLE runs RENAME COLUMN {old} TO {new}")
    op.create_index(index_to[0], "runs", ["repo", "issue", index_to[1]])
    op.execute(f"UPDATE runs SET exit_reason = '{reasons[1]}' "
               f"WHERE exit_reason = '{reasons[0]}'")


def upgrade() -> None:
    _rename(COLUMNS, INDEXES[0], INDEXES[1], EXIT_REASONS)


def downgrade() -> None:
    _rename(tuple((new, old) for old, new in COLUMNS), INDEXES[1], INDEXES[0],
            (EXIT_REASONS[1], EXIT_REASONS[0]))
