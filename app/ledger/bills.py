"""The billing ledger: every bill once (its job id is the key), read back by account and time,
and summed into usage. A bill's arrival is idempotent, so its writer may deliver it again after
any crash (see app/ledger/outbox.py): a second copy changes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.ledger.schema import Bill

GroupBy = Literal["account", "type", "queue", "day"]
_GROUPS = {"account": Bill.user_id, "type": Bill.type, "queue": Bill.queue, "day": Bill.day}


def day_of(at: float) -> date:
    """The UTC day of a Unix time."""
    return datetime.fromtimestamp(at, UTC).date()


def bill_row(record: dict[str, Any]) -> dict[str, Any]:
    """A bill as the job store writes it (finish.lua's JSON) as a row of the ledger."""
    at = float(record["billed_at"])
    return {
        "task_id": str(record["task_id"]),
        "user_id": str(record["user_id"]),
        "queue": str(record["kind"]),
        "type": str(record.get("type") or "burn"),
        "cost_micros": int(record["cost_micros"]),
        "gpu_seconds": float(record["gpu_seconds"]),
        "billed_ms": int(record["billed_ms"]),
        "billed_at": at,
        "day": day_of(at),
        "description": str(record.get("description", "")),
    }


def record(session: Session, rows: Sequence[dict[str, Any]]) -> int:
    """Insert bills that are not in the ledger yet (by job id); how many were new."""
    if not rows:
        return 0
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(Bill).values(list(rows)).on_conflict_do_nothing(index_elements=["task_id"])
    return len(session.execute(statement.returning(Bill.task_id)).all())


def _window(
    user_id: str | None, start: float | None, end: float | None
) -> list[ColumnElement[bool]]:
    """The conditions of an account's bills (every account's for None) in [start, end)."""
    where: list[ColumnElement[bool]] = []
    if user_id is not None:
        where.append(Bill.user_id == user_id)
    if start is not None:
        where.append(Bill.billed_at >= start)
    if end is not None:
        where.append(Bill.billed_at < end)
    return where


def bills(
    session: Session,
    user_id: str,
    *,
    limit: int,
    start: float | None = None,
    end: float | None = None,
    before: tuple[float, str] | None = None,
) -> list[Bill]:
    """An account's bills, newest first: at most limit, billed in [start, end), and older than
    the cursor `before` (the billed_at and task id of the last bill of the previous page)."""
    query: Select[Bill] = select(Bill).where(*_window(user_id, start, end))
    if before is not None:
        at, task_id = before
        query = query.where(
            (Bill.billed_at < at) | ((Bill.billed_at == at) & (Bill.task_id < task_id))
        )
    query = query.order_by(Bill.billed_at.desc(), Bill.task_id.desc()).limit(limit)
    return list(session.scalars(query))


@dataclass(frozen=True)
class Usage:
    """What one group used: GPU-seconds, jobs billed and their cost (micro-units)."""

    key: str
    gpu_seconds: float
    jobs: int
    cost_micros: int


def usage(
    session: Session,
    group_by: GroupBy,
    *,
    user_id: str | None = None,
    start: float | None = None,
    end: float | None = None,
) -> list[Usage]:
    """Usage in [start, end), per group, for one account (None: every account)."""
    column = _GROUPS[group_by]
    query = (
        select(column, func.sum(Bill.gpu_seconds), func.count(), func.sum(Bill.cost_micros))
        .where(*_window(user_id, start, end))
        .group_by(column)
        .order_by(column)
    )
    return [
        Usage(str(key), float(gpu or 0), int(jobs), int(cost or 0))
        for key, gpu, jobs, cost in session.execute(query)
    ]
