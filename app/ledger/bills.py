"""The billing ledger: every bill once (its job id is the key), read back by account and time,
and summed into usage. A bill's arrival is idempotent, so its writer may deliver it again after
any crash (see app/ledger/outbox.py): a second copy changes nothing. Bills come and go as
app/bill.py's Bill, whichever side holds them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.bill import Bill
from app.ledger.schema import BILLS

GroupBy = Literal["account", "type", "queue", "day", "gpu_class"]
_GROUPS = {
    "account": BILLS.c.user_id,
    "type": BILLS.c.type,
    "queue": BILLS.c.queue,
    "day": BILLS.c.day,
    "gpu_class": BILLS.c.gpu_class,  # null: a bill of a fleet without GPU_CLASSES
}


def record(session: Session, new: Sequence[Bill]) -> int:
    """Insert bills that are not in the ledger yet (by job id); how many were new."""
    if not new:
        return 0
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    rows = [bill.row() for bill in new]
    statement = insert(BILLS).values(rows).on_conflict_do_nothing(index_elements=["task_id"])
    return len(session.execute(statement.returning(BILLS.c.task_id)).all())


def read(session: Session, query: Select[Any]) -> list[Bill]:
    """The bills a query of the table selects."""
    return [Bill.from_row(row._asdict()) for row in session.execute(query)]


def _window(
    user_id: str | None, start: float | None, end: float | None
) -> list[ColumnElement[bool]]:
    """The conditions of an account's bills (every account's for None) in [start, end)."""
    where: list[ColumnElement[bool]] = []
    if user_id is not None:
        where.append(BILLS.c.user_id == user_id)
    if start is not None:
        where.append(BILLS.c.billed_at >= start)
    if end is not None:
        where.append(BILLS.c.billed_at < end)
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
    query = select(BILLS).where(*_window(user_id, start, end))
    if before is not None:
        at, task_id = before
        query = query.where(
            (BILLS.c.billed_at < at) | ((BILLS.c.billed_at == at) & (BILLS.c.task_id < task_id))
        )
    newest = query.order_by(BILLS.c.billed_at.desc(), BILLS.c.task_id.desc())
    return read(session, newest.limit(limit))


@dataclass(frozen=True)
class Usage:
    """What one group used: GPU-seconds, jobs billed and their cost (micro-units). The key is
    None for the bills with no gpu_class, grouped by it."""

    key: str | None
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
    """Usage in [start, end), per group, for one account (None: every account), in the order
    of their keys (the group without one last, as every database puts it)."""
    column = _GROUPS[group_by]
    query = (
        select(column, func.sum(BILLS.c.gpu_seconds), func.count(), func.sum(BILLS.c.cost_micros))
        .where(*_window(user_id, start, end))
        .group_by(column)
    )
    found = [
        Usage(_key(key), float(gpu or 0), int(jobs), int(cost or 0))
        for key, gpu, jobs, cost in session.execute(query)
    ]
    return sorted(found, key=_order)


def _key(value: object) -> str | None:
    """A group's key as a report names it (a day in ISO form); None stays None."""
    return None if value is None else str(value)


def _order(used: Usage) -> tuple[bool, str]:
    return used.key is None, used.key or ""


def _within(bill: Bill, start: float | None, end: float | None) -> bool:
    return (start is None or bill.billed_at >= start) and (end is None or bill.billed_at < end)


def page(
    written: Sequence[Bill],
    unwritten: Sequence[Bill],
    *,
    limit: int,
    start: float | None = None,
    end: float | None = None,
    before: tuple[float, str] | None = None,
) -> list[Bill]:
    """One page of bills, newest first: the ledger's page (`written`, from bills()) with the
    bills still on their way to it, each once, in [start, end) and older than `before`. Exact,
    because every bill that could make this page is in one of the two."""
    found: dict[str, Bill] = {}
    for bill in [*written, *unwritten]:
        found.setdefault(bill.task_id, bill)
    chosen = [
        bill
        for bill in found.values()
        if _within(bill, start, end) and (before is None or (bill.billed_at, bill.task_id) < before)
    ]
    chosen.sort(key=lambda b: (b.billed_at, b.task_id), reverse=True)
    return chosen[:limit]


def find(session: Session, user_id: str, task_id: str) -> Bill | None:
    """The account's bill for this job, if the ledger has it."""
    query = select(BILLS).where(BILLS.c.task_id == task_id, BILLS.c.user_id == user_id)
    return next(iter(read(session, query)), None)


def usage_with(
    session: Session,
    group_by: GroupBy,
    unwritten: Sequence[Bill],
    *,
    user_id: str | None = None,
    start: float | None = None,
    end: float | None = None,
) -> list[Usage]:
    """usage(), counting too the bills on their way to the ledger (those it does not hold yet:
    one written meanwhile is counted once)."""
    mine = [
        b for b in unwritten if (user_id is None or b.user_id == user_id) and _within(b, start, end)
    ]
    ids = [b.task_id for b in mine]
    query = select(BILLS.c.task_id).where(BILLS.c.task_id.in_(ids))
    held = set(session.scalars(query)) if ids else set()
    sums = {u.key: u for u in usage(session, group_by, user_id=user_id, start=start, end=end)}
    for bill in mine:
        if bill.task_id in held:
            continue
        key = _key(bill.row()[_GROUPS[group_by].key])
        old = sums.get(key, Usage(key, 0.0, 0, 0))
        sums[key] = Usage(
            key,
            old.gpu_seconds + bill.gpu_seconds,
            old.jobs + 1,
            old.cost_micros + bill.cost_micros,
        )
    return sorted(sums.values(), key=_order)
