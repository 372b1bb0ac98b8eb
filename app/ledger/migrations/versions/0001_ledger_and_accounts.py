"""The ledger of bills, the accounts, their keys and the audit log.

Revision ID: 0001
Revises:
Create Date: 2026-12-03
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
        "bills",
        sa.Column("task_id", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("queue", sa.String(16), nullable=False),
        sa.Column("type", sa.String(128), nullable=False),
        sa.Column("cost_micros", sa.BigInteger, nullable=False),
        sa.Column("gpu_seconds", sa.Float, nullable=False),
        sa.Column("billed_ms", sa.BigInteger, nullable=False),
        sa.Column("billed_at", sa.Float, nullable=False),
        sa.Column("day", sa.Date, nullable=False),
        sa.Column("description", sa.Text, nullable=False),
    )
    op.create_index("bills_by_account", "bills", ["user_id", "billed_at"])
    op.create_table(
        "accounts",
        sa.Column("user_id", sa.String(128), primary_key=True),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("share", sa.Float, nullable=False),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("disabled", sa.Boolean, nullable=False),
        sa.Column("max_queued", sa.Integer, nullable=True),
        sa.Column("budget_gpu_seconds", sa.Float, nullable=True),
        sa.Column("budget_cost_micros", sa.BigInteger, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(128), sa.ForeignKey("accounts.user_id"), nullable=False),
        sa.Column("label", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
    )
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
    )


def downgrade() -> None:
    for table in ("audit", "api_keys", "accounts", "bills"):
        op.drop_table(table)
