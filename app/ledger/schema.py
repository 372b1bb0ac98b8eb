"""The tables. Times are Unix seconds (Redis's clock, as the job records keep them). The bills'
table is declared with the bill itself (app/bill.py table), so that a bill's fields are named in
one module."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from app.bill import table


class Base(DeclarativeBase):
    """The metadata of every table (Alembic's target)."""


#: One row per bill, its job id the key (app/bill.py Bill.row, Bill.from_row).
BILLS = table(Base.metadata)


class AccountRow(Base):
    """An account: who pays, its share of the GPUs, its quotas and limits, its monthly budgets."""

    __tablename__ = "accounts"

    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    description: Mapped[str] = mapped_column(Text, default="")
    share: Mapped[float] = mapped_column(Float, default=1.0)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    max_queued: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_running: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_held_gpu_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    budget_gpu_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    budget_cost_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)


class KeyRow(Base):
    """An API key, by the SHA-256 digest of its text (the text itself is never stored)."""

    __tablename__ = "api_keys"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("accounts.user_id"))
    label: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class AuditRow(Base):
    """One change of an account or a key: who made it, what, when."""

    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(128))
    detail: Mapped[str] = mapped_column(Text, default="{}")
