"""Billing records and usage: what accounts have been charged, from the SQL ledger (which
outlives the job records), with the bills still on their way to it (app/ledger/outbox.py), so a
bill is here as soon as its job has ended."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status

from app.api.deps import CallerDep, RuntimeDep
from app.api.responses import ERRORS
from app.api.routing import KeyedRoute
from app.api.runtime import Runtime
from app.bill import MICROS, Bill
from app.ledger import bills
from app.models import ErrorBody
from app.usage_models import BillingRecord, GroupBy, UsageReport, UsageRow

router = APIRouter(tags=["billing"], route_class=KeyedRoute)
BAD_QUERY: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorBody, "description": "a time, limit, cursor or grouping outside its form"}
}
NO_SUCH_BILL = "before: no billing record of yours has this task_id"
TIME_FORM = "an ISO 8601 date or time (UTC unless it says), or a Unix time in seconds"
From = Annotated[
    float | datetime | None,
    Query(alias="from", description=f"bills from this time on: {TIME_FORM}"),
]
To = Annotated[
    float | datetime | None, Query(alias="to", description=f"bills before this time: {TIME_FORM}")
]


def unix(at: float | datetime | None) -> float | None:
    """A query's time as Unix seconds (a time without a zone is UTC)."""
    if at is None or isinstance(at, float):
        return at
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


@router.get(
    "/billing-records",
    response_model=list[BillingRecord],
    responses={
        **ERRORS,
        **BAD_QUERY,
        404: {"model": ErrorBody, "description": "`before` is not one of the caller's bills"},
    },
)
async def billing_records(
    caller: CallerDep,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="most records to return")] = 100,
    start: From = None,
    end: To = None,
    before: Annotated[
        uuid.UUID | None,
        Query(description="the task_id of the last record of the previous page: older ones"),
    ] = None,
) -> list[BillingRecord]:
    """The caller's billing records, newest first, billed in [from, to) (none when `to` is not
    after `from`). For the next page, pass the last record's task_id as `before`."""
    user_id = caller.account.user_id
    begins, ends = unix(start), unix(end)
    unwritten = await runtime.store.unwritten_bills(user_id)
    cursor = None if before is None else await _cursor(runtime, user_id, str(before), unwritten)

    def read() -> list[Bill]:
        with runtime.ledger.db.sessions() as session:
            return bills.bills(session, user_id, limit=limit, start=begins, end=ends, before=cursor)

    written = await asyncio.to_thread(read)
    page = bills.page(written, unwritten, limit=limit, start=begins, end=ends, before=cursor)
    return [bill.record() for bill in page]


async def _cursor(
    runtime: Runtime, user_id: str, task_id: str, unwritten: list[Bill]
) -> tuple[float, str]:
    """Where the page before ended: the time and id of the caller's bill of task_id."""
    bill = next((b for b in unwritten if b.task_id == task_id), None)
    if bill is None:

        def find() -> Bill | None:
            with runtime.ledger.db.sessions() as session:
                return bills.find(session, user_id, task_id)

        bill = await asyncio.to_thread(find)
    if bill is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=NO_SUCH_BILL)
    return bill.billed_at, task_id


@router.get("/usage", response_model=UsageReport, responses={**ERRORS, **BAD_QUERY})
async def usage(
    caller: CallerDep,
    runtime: RuntimeDep,
    start: From = None,
    end: To = None,
    group_by: Annotated[GroupBy, Query(description="what a row sums")] = "account",
) -> UsageReport:
    """GPU-seconds, jobs and cost billed in [from, to), per account, job type, queue, UTC day
    or class of card (gpu_class; its row key null for bills without one): every account's for
    an admin, the caller's own for anyone else."""
    begins, ends = unix(start), unix(end)
    user_id = None if caller.account.admin else caller.account.user_id
    unwritten = await runtime.store.unwritten_bills(user_id)

    def read() -> list[bills.Usage]:
        with runtime.ledger.db.sessions() as session:
            return bills.usage_with(
                session, group_by, unwritten, user_id=user_id, start=begins, end=ends
            )

    rows = [_row(u) for u in await asyncio.to_thread(read)]
    total = bills.Usage(
        "total",
        sum(r.gpu_seconds for r in rows),
        sum(r.jobs for r in rows),
        sum(r.cost_micros for r in rows),
    )
    return UsageReport(group_by=group_by, from_=begins, to=ends, rows=rows, total=_row(total))


def _row(used: bills.Usage) -> UsageRow:
    return UsageRow(
        key=used.key,
        gpu_seconds=round(used.gpu_seconds, 3),
        jobs=used.jobs,
        cost=used.cost_micros / MICROS,
        cost_micros=used.cost_micros,
    )
