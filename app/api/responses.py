"""What several routes answer alike: the documented error responses, and a job's status."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, status

from app.api.deps import NOT_FOUND
from app.api.runtime import Runtime
from app.auth import Account
from app.models import ErrorBody, Status, TaskStatus
from app.store import JobRecord

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or invalid API key"},
    429: {"model": ErrorBody, "description": "too many requests with this key; see Retry-After"},
    503: {"model": ErrorBody, "description": "Redis is unreachable; retry later"},
}
NOT_YOURS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "no such task, or not the caller's"},
}


async def any_job(runtime: Runtime, task_id: str) -> JobRecord:
    """The job, whoever owns it (for admins); 404 when there is none."""
    job = await runtime.store.get(task_id)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=NOT_FOUND)
    return job


async def owned_job(runtime: Runtime, account: Account, task_id: str) -> JobRecord:
    """The account's job; the same 404 for one that is not there and one that is not theirs."""
    job = await runtime.store.get(task_id)
    if job is None or job.owner != account.user_id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=NOT_FOUND)
    return job


async def job_status(runtime: Runtime, job: JobRecord) -> TaskStatus:
    """The job's status, with its place in line and estimated start while it is queued."""
    if job.status is not Status.PENDING:
        return job.status_view()
    position = await runtime.queues[job.kind].position(job.task_id)
    return await placed_status(runtime, job, position)


async def placed_status(runtime: Runtime, job: JobRecord, position: int | None) -> TaskStatus:
    """A queued job's status at a place in line, with its estimated start."""
    start_at = None
    if position is not None:
        start_at = await runtime.estimator.start_at(job.kind, position, job.duration_s)
    return job.status_view(position, start_at)
