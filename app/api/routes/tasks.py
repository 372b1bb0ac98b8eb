"""The caller's jobs: GET /tasks (its account is GET /account, in accounts.py)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from app.api.deps import CallerDep, RuntimeDep
from app.api.live import listing
from app.api.responses import ERRORS, job_status
from app.api.routing import KeyedRoute
from app.models import ErrorBody, Status, TaskPage

router = APIRouter(tags=["jobs"], route_class=KeyedRoute)


@router.get(
    "/tasks",
    response_model=TaskPage,
    responses={
        **ERRORS,
        422: {"model": ErrorBody, "description": "a status, limit or cursor outside its schema"},
    },
)
async def tasks(
    caller: CallerDep,
    runtime: RuntimeDep,
    status_: Annotated[Status | None, Query(alias="status", description="only this status")] = None,
    limit: Annotated[int, Query(ge=1, le=100, description="most jobs on this page")] = 20,
    cursor: Annotated[
        str | None,
        Query(
            pattern=listing.CURSOR_PATTERN,
            description="the previous page's next_cursor (any text of this form is a place in "
            "the list to go on from)",
        ),
    ] = None,
) -> TaskPage:
    """The caller's jobs, newest first, a page at a time. With a status filter a page may hold
    fewer than `limit` jobs and still have a next_cursor: follow it until it is null."""
    try:
        after = None if cursor is None else listing.Cursor.decode(cursor)
    except listing.BadCursorError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=str(exc)) from None
    jobs, more = await listing.page(
        runtime.redis, caller.account.user_id, limit, status=status_, after=after
    )
    shown = await asyncio.gather(*(job_status(runtime, job) for job in jobs))
    return TaskPage(tasks=list(shown), next_cursor=None if more is None else more.encode())
