"""Bills' gpu_class: the class of card (GPU_CLASSES) a job's bill was priced for.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: every bill there is was made before classes, as one of a fleet without a catalog
    # is made now. In a batch, for SQLite (see env.py).
    with op.batch_alter_table("bills") as batch:
        batch.add_column(sa.Column("gpu_class", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("bills") as batch:
        batch.drop_column("gpu_class")
