"""run records: runs, their transcript events, their tool-call totals

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("repo", sa.String(400), nullable=False),
        sa.Column("issue", sa.String(200), nullable=False),
        sa.Column("trigger", sa.String(32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("outcome", sa.String(32)),
        sa.Column("exit_reason", sa.String(64)),
        sa.Column("model", sa.String(400)),
        sa.Column("test_command", sa.Text()),
        sa.Column("delivery_id", sa.String(64)),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float()),
        sa.Column("finished_at", sa.Float()),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("seconds", sa.Float()),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens_evaluated", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("prompt_seconds", sa.Float(), nullable=False),
        sa.Column("completion_seconds", sa.Float(), nullable=False),
        sa.Column("sandbox_seconds", sa.Float(), nullable=False),
        sa.Column("tests_before", sa.Text()),
        sa.Column("tests_after", sa.Text()),
        sa.Column("pr_url", sa.String(500)),
        sa.Column("transcript_path", sa.Text()),
        sa.Column("error", sa.Text()),
    )
    op.create_index("ix_runs_repo_issue_attempt", "runs", ["repo", "issue", "attempt"])
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_index("ix_runs_created_at", "runs", ["created_at"])
    op.create_table(
        "run_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
    )
    op.create_index("ix_run_events_run_seq", "run_events", ["run_id", "seq"])
    op.create_table(
        "run_tool_stats",
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("tool", sa.String(64), primary_key=True),
        sa.Column("outcome", sa.String(16), primary_key=True),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_tool_stats")
    op.drop_index("ix_run_events_run_seq", "run_events")
    op.drop_table("run_events")
    op.drop_index("ix_runs_created_at", "runs")
    op.drop_index("ix_runs_status", "runs")
    op.drop_index("ix_runs_repo_issue_attempt", "runs")
    op.drop_table("runs")
