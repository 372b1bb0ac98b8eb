"""Accounts' run_scripts: whether one may upload its own code and run it as script jobs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Not null, false for every account there is: none may run scripts until an admin says so.
    # In a batch, for SQLite (see env.py).
    with op.batch_alter_table("accounts") as batch:
        batch.add_column(
            sa.Column("run_scripts", sa.Boolean, nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("accounts") as batch:
        batch.drop_column("run_scripts")
