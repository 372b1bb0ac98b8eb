"""What several routes answer alike: JSON rendered by orjson, the documented error responses,
and a job's status."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from fastapi import HTTPException, Request, Response, status
from fastapi.responses import JSONResponse
from fastapi.utils import is_body_allowed_for_status_code
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.deps import NOT_FOUND
from app.api.live import held
from app.api.runtime import Runtime
from app.auth import Account
from app.card_models import Reservation
from app.fleet.needs import catalog_of
from app.fleet.routing import mixed
from app.fleet.view import live_classes, live_fleet_async
from app.models import ErrorBody, Status, TaskStatus, WaitingFor
from app.store import JobRecord
from app.wiring.limits import limits_for
from app.wiring.service import WEIGHT_PER_S, job_weight


class OrjsonResponse(JSONResponse):
    """A JSON answer rendered by orjson: the app's default response class, and its error
    handlers'. Its bytes are those of Starlette's compact json.dumps and of pydantic's JSON for
    everything the API answers; they differ only in the spelling of floats under 1e-4 (2.5e-7,
    not 2.5e-07; pydantic spells them so too) and in NaN, which is null here, as in pydantic,
    rather than an error. (FastAPI's own ORJSONResponse is deprecated, and warns.)"""

    def render(self, content: Any) -> bytes:
        """The content as compact UTF-8 JSON; dict keys that are not strings become strings."""
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS)


async def json_error(request: Request, exc: Exception) -> Response:
    """An HTTPException's answer, as FastAPI's own handler gives it ({"detail": ...} and the
    exception's headers; no body where the status allows none), rendered by orjson."""
    assert isinstance(exc, StarletteHTTPException)
    headers = getattr(exc, "headers", None)
    if not is_body_allowed_for_status_code(exc.status_code):
        return Response(status_code=exc.status_code, headers=headers)
    return OrjsonResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)


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
    """A queued job's status at a place in line, with its estimated start and why it waits: no
    worker of the fleet has a card of a class it may run on (gpu_class: no estimate then), else
    its account's limits (its start is then when they should let it, its account's jobs ahead
    of it walked in order: app/api/live/held.py), else it is next (a GPU), else other jobs go
    first (its turn). A job of several cards that holds a reservation waits for its cards
    (gpu), and starts when they should all be free."""
    if position is None:
        return job.status_view(position, None)
    if not await _served(runtime, job):
        return job.status_view(position, None, "gpu_class")
    reserved = await _reservation(runtime, job)
    if reserved is not None:  # its turn has come: only its cards are awaited
        return job.status_view(position, reserved.expected_start_at, "gpu", reserved)
    account = runtime.accounts.get(job.owner)
    if account is None or limits_for(account).none:
        # an account without limits is never held back: no read of the queue's limits for it
        start_at = await runtime.estimator.start_at(
            job.kind, position, job.duration_s, job.gpu_classes
        )
        return job.status_view(position, start_at, "gpu" if position == 0 else "turn")
    line = await held.read(runtime.queues[job.kind], job.owner, job.task_id)
    ahead = 0 if line.walk is None else line.walk.ahead
    # the queue's estimate for the jobs of other accounts ahead of it; its own account's are
    # the walk's to play out
    others = max(0, position - ahead)
    start_at = await runtime.estimator.start_at(job.kind, others, job.duration_s, job.gpu_classes)
    if start_at is not None and line.walk is not None:
        own_s = job_weight(job.duration_s) * job.gpus / WEIGHT_PER_S  # as its queue weighs it
        start_at = held.start_at(line.walk, own_s, start_at)
    waiting_for: WaitingFor = "gpu" if position == 0 else "turn"
    if line.hold is not None:
        waiting_for = "account_limit"
    return job.status_view(position, start_at, waiting_for)


async def _reservation(runtime: Runtime, job: JobRecord) -> Reservation | None:
    """The cards set aside for a queued job of several cards, if it holds some (the fair
    queue's reservations: a read of the fleet's hosts and of their reservations). A job of one
    card never holds one, and costs no read."""
    if job.gpus == 1:
        return None
    queue = runtime.service.queues[job.kind]
    held = (await asyncio.to_thread(queue.reservations)).get(job.task_id)
    if held is None:
        return None
    return Reservation(host=held.host, expected_start_at=held.start_at)


async def _served(runtime: Runtime, job: JobRecord) -> bool:
    """Whether a live worker (one heard within FLEET_TTL_S) has a card of a class the job may
    run on. Asked only in a mixed fleet: with one class (or none) every worker serves every job,
    and the status costs what it did before the catalog."""
    settings = runtime.settings
    if not job.gpu_classes or not mixed(catalog_of(settings.gpu_classes)):
        return True
    fleet = await live_fleet_async(runtime.redis, settings.fleet_ttl_s, runtime.clock.now())
    return not live_classes(fleet).isdisjoint(job.gpu_classes)
