"""Bills' gpus: how many cards a job held at once (issue 42), so its GPU-seconds read N x.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Not null, 1 by the server's default: every bill there is was of a job of one card, and a
    # writer of the release before (a rolling deploy) names no gpus. In a batch, for SQLite.
    with op.batch_alter_table("bills") as batch:
        batch.add_column(sa.Column("gpus", sa.Integer, nullable=False, server_default="1"))


def downgrade() -> None:
    with op.batch_alter_table("bills") as batch:
        batch.drop_column("gpus")
