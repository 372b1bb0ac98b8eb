"""Accounts' limits on their running jobs: how many at once, and the GPU-seconds they hold.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: every account there is keeps no limit. In a batch, for SQLite (see env.py).
    with op.batch_alter_table("accounts") as batch:
        batch.add_column(sa.Column("max_running", sa.Integer, nullable=True))
        batch.add_column(sa.Column("max_held_gpu_seconds", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("accounts") as batch:
        batch.drop_column("max_held_gpu_seconds")
        batch.drop_column("max_running")
