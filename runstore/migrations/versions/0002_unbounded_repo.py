"""runs.repo as text: `frognano solve` records the checkout's absolute path there, which
may exceed VARCHAR(400); PostgreSQL refused such a run while SQLite kept it

Revision ID: 0002
Revises: 0001
Create Date: 2026-05-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # SQLite never enforced the length, and its batch mode would rebuild `runs`, whose
    # drop cascades to run_events under foreign_keys=ON: nothing to gain, data to lose.
    if op.get_bind().dialect.name == "sqlite":
        return
    op.alter_column("runs", "repo", type_=sa.Text(), existing_type=sa.String(400),
                    existing_nullable=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    op.alter_column("runs", "repo", type_=sa.String(400), existing_type=sa.Text(),
                    existing_nullable=False)
