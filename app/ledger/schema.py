"""The tables. Times are Unix seconds (Redis's clock, as the job records keep them); a bill
also keeps its UTC day, so that usage can be grouped by day the same way on every database."""

from __future__ import annotations

from datetime import date

from sqlalchemy import BigInteger, Boolean, Date, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """The metadata of every table (Alembic's target)."""


class Bill(Base):
    """One bill: what a job's run cost its owner. The job id is the key: a bill is written
    once, however many times its writer is told of it."""

    __tablename__ = "bills"

    task_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(128))
    queue: Mapped[str] = mapped_column(String(16))
    type: Mapped[str] = mapped_column(String(128))
    cost_micros: Mapped[int] = mapped_column(BigInteger)
    gpu_seconds: Mapped[float] = mapped_column(Float)
    billed_ms: Mapped[int] = mapped_column(BigInteger)
    billed_at: Mapped[float] = mapped_column(Float)
    day: Mapped[date] = mapped_column(Date)
    description: Mapped[str] = mapped_column(Text, default="")

    __table_args__ = (Index("bills_by_account", "user_id", "billed_at"),)


class AccountRow(Base):
    """An account: who pays, its share of the GPUs, its quotas and its monthly budgets."""

    __tablename__ = "accounts"

    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    description: Mapped[str] = mapped_column(Text, default="")
    share: Mapped[float] = mapped_column(Float, default=1.0)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    max_queued: Mapped[int | None] = mapped_column(Integer, nullable=True)
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
