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


def as_bill(row: Bill) -> dict[str, Any]:
    """A ledger row as the job store wrote the bill (finish.lua's JSON): the one shape that
    readers of bills take, wherever the bill is."""
    return {
        "task_id": row.task_id,
        "user_id": row.user_id,
        "kind": row.queue,
        "type": row.type,
        "cost_micros": row.cost_micros,
        "description": row.description,
        "gpu_seconds": row.gpu_seconds,
        "billed_ms": row.billed_ms,
        "billed_at": row.billed_at,
    }


def _within(bill: dict[str, Any], start: float | None, end: float | None) -> bool:
    at = float(bill["billed_at"])
    return (start is None or at >= start) and (end is None or at < end)


def page(
    written: Sequence[dict[str, Any]],
    unwritten: Sequence[dict[str, Any]],
    *,
    limit: int,
    start: float | None = None,
    end: float | None = None,
    before: tuple[float, str] | None = None,
) -> list[dict[str, Any]]:
    """One page of bills, newest first: the ledger's page (`written`, from bills()) with the
    bills still on their way to it, each once, in [start, end) and older than `before`. Exact,
    because every bill that could make this page is in one of the two."""
    found: dict[str, dict[str, Any]] = {}
    for bill in [*written, *unwritten]:
        found.setdefault(str(bill["task_id"]), bill)
    chosen = [
        bill
        for bill in found.values()
        if _within(bill, start, end)
        and (before is None or (float(bill["billed_at"]), str(bill["task_id"])) < before)
    ]
    chosen.sort(key=lambda b: (float(b["billed_at"]), str(b["task_id"])), reverse=True)
    return chosen[:limit]


def find(session: Session, user_id: str, task_id: str) -> Bill | None:
    """The account's bill for this job, if the ledger has it."""
    bill = session.get(Bill, task_id)
    return bill if bill is not None and bill.user_id == user_id else None


def usage_with(
    session: Session,
    group_by: GroupBy,
    unwritten: Sequence[dict[str, Any]],
    *,
    user_id: str | None = None,
    start: float | None = None,
    end: float | None = None,
) -> list[Usage]:
    """usage(), counting too the bills on their way to the ledger (those it does not hold yet:
    one written meanwhile is counted once)."""
    mine = [
        b
        for b in unwritten
        if (user_id is None or b["user_id"] == user_id) and _within(b, start, end)
    ]
    ids = [str(b["task_id"]) for b in mine]
    held = set(session.scalars(select(Bill.task_id).where(Bill.task_id.in_(ids)))) if ids else set()
    sums = {u.key: u for u in usage(session, group_by, user_id=user_id, start=start, end=end)}
    for bill in mine:
        if str(bill["task_id"]) in held:
            continue
        row = bill_row(bill)
        key = str(row[_GROUPS[group_by].key])
        old = sums.get(key, Usage(key, 0.0, 0, 0))
        sums[key] = Usage(
            key,
            old.gpu_seconds + row["gpu_seconds"],
            old.jobs + 1,
            old.cost_micros + row["cost_micros"],
        )
    return [sums[key] for key in sorted(sums)]
