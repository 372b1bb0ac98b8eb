"""Jobs: submit one, read its status, or stream its changes as server-sent events."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Response, status
from redis.exceptions import RedisError
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.deps import NOT_FOUND, CallerDep, RuntimeDep, TaskIdDep
from app.api.live.outage import Outage, RedisAwayError, error_event
from app.api.responses import ERRORS, NOT_YOURS, job_status, owned_job, placed_status
from app.api.routing import KeyedRoute
from app.api.runtime import Runtime
from app.api.submissions import Submission, submission
from app.errors import IdempotencyMismatchError
from app.models import (
    EnqueueBody,
    EnqueueRequest,
    EnqueueResponse,
    ErrorBody,
    Kind,
    Status,
    TaskStatus,
)
from app.store import JobRecord
from app.vtrr import DuplicateTaskError, QueueFullError

log = logging.getLogger(__name__)
router = APIRouter(tags=["jobs"], route_class=KeyedRoute)
IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        pattern=r"^[!-~]+$",
        description="any printable ASCII text up to 255 characters, chosen by the client",
    ),
]
EVENT_ID = re.compile(r"(\d{1,20})-(\d{1,20})")
MAX_PART = 2**64 - 1
QUEUE_FULL_RETRY_S = 30
ETA_SLACK_S = 5.0  # a guess at when some of the account's jobs will have started


async def valid_job(body: EnqueueBody, runtime: RuntimeDep) -> Submission:
    """The job the body asks for, if its type is known and available, its input fits and its
    duration is within the limits; 422 otherwise. A dependency, so that a refused job is not
    counted against the key's rate (KeyedRoute counts in the endpoint)."""
    return submission(body, runtime.job_types, runtime.settings)


#: The job; an EnqueueRequest too, for a caller of the endpoint itself (the benchmarks).
ValidJob = Annotated[Submission | EnqueueRequest, Depends(valid_job)]


@router.post(
    "/enqueue-task",
    response_model=EnqueueResponse,
    responses={
        **ERRORS,
        413: {"model": ErrorBody, "description": "body over 64 KiB"},
        422: {
            "model": ErrorBody,
            "description": "an invalid job (an unknown or unavailable type, an input that its "
            "type refuses, a duration over the limit), a body not sent as application/json, "
            "or an Idempotency-Key used before with another body",
        },
    },
)
async def enqueue_task(
    body: ValidJob,
    caller: CallerDep,
    runtime: RuntimeDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> EnqueueResponse:
    """Queue a job for the caller's account in the short or long fair queue: a job of a
    registered type (GET /job-types) with its input, or, with the body {"kind", "duration_s"},
    a job of the built-in type burn.

    With an Idempotency-Key, repeating the request returns the first request's task instead of
    queueing another; the same key with a different body is a 422.
    """
    job = body if isinstance(body, Submission) else await valid_job(body, runtime)
    account = caller.account
    once = None if idempotency_key is None else (idempotency_key, job.fingerprint())
    try:
        job_id, created = await runtime.store.create(
            str(uuid.uuid4()),
            account.user_id,
            job.kind,
            job.duration_s,
            once,
            job_type=job.type,
            input_json=job.input_json,
        )
    except IdempotencyMismatchError:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail="this Idempotency-Key was used with a different request",
        ) from None
    if created:
        await _enqueue(runtime, account.user_id, job, job_id, replay=False)
        log.info(
            "job queued",
            extra={"task_id": job_id, "account": account.user_id, "queue": job.kind},
        )
    else:
        first = await runtime.store.get(job_id)
        if first is not None and first.status is Status.PENDING:
            # The first request may have died between its two steps: make sure it is queued.
            await _enqueue(runtime, account.user_id, job, job_id, replay=True)
    return EnqueueResponse(task_id=job_id)


async def _enqueue(
    runtime: Runtime, user_id: str, job: Submission, job_id: str, *, replay: bool
) -> None:
    """Put a created job in its fair queue. A replay (a repeated Idempotency-Key) was accepted
    under the quota already: it is never refused for it, and is a no-op once queued."""
    item = runtime.service.job_item(job.kind, job_id, job.duration_s)
    most = runtime.settings.max_queued_per_account
    try:
        _, triggers = await runtime.queues[job.kind].enqueue(
            user_id, [item], max_queued=None if replay else most
        )
    except DuplicateTaskError:
        return  # queued already, by the first request or a concurrent replay
    except BaseException as exc:
        if not replay:
            await runtime.store.delete(job_id, user_id)  # nothing half-written: no one saw this id
        if isinstance(exc, QueueFullError):
            raise HTTPException(
                status.HTTP_429_TOO_MANY_REQUESTS,
                detail=f"this account already has {most} jobs queued in {job.kind}",
                headers={"Retry-After": str(QUEUE_FULL_RETRY_S)},
            ) from None
        raise
    await runtime.store.queued(job_id)
    if triggers:
        publish = runtime.service.queues[job.kind].publish_triggers
        await asyncio.to_thread(publish, triggers)  # Celery's publish blocks: not on the loop


@router.get("/task-status/{task_id}", response_model=TaskStatus, responses={**ERRORS, **NOT_YOURS})
async def task_status(task_id: TaskIdDep, caller: CallerDep, runtime: RuntimeDep) -> TaskStatus:
    """The job's status, result, attempts, and its place in line while queued."""
    return await job_status(runtime, await owned_job(runtime, caller.account, task_id))


@router.delete(
    "/tasks/{task_id}",
    response_model=TaskStatus,
    status_code=status.HTTP_200_OK,
    responses={
        **ERRORS,
        **NOT_YOURS,
        200: {"description": "the job was queued and is now REVOKED, unbilled"},
        202: {
            "model": TaskStatus,
            "description": "the job is running and was asked to stop; it ends REVOKED, billed "
            "for the time it ran",
        },
        409: {"model": ErrorBody, "description": "the job has already ended"},
    },
)
async def cancel_task(
    task_id: TaskIdDep, caller: CallerDep, runtime: RuntimeDep, response: Response
) -> TaskStatus:
    """Cancel one of the caller's jobs."""
    job = await owned_job(runtime, caller.account, task_id)
    outcome = await runtime.store.revoke(task_id)
    log.info("job cancelled", extra={"task_id": task_id, "account": caller.account.user_id})
    if outcome == "revoked":
        # It is REVOKED already; if a worker leases it meanwhile, start.lua will not run it.
        await runtime.queues[job.kind].cancel(task_id)
    elif outcome == "stopping":
        response.status_code = status.HTTP_202_ACCEPTED
    elif outcome == "gone":
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=NOT_FOUND)
    else:
        raise HTTPException(
            status.HTTP_409_CONFLICT, detail=f"the task has already ended: {outcome}"
        )
    fresh = await runtime.store.get(task_id)
    return await job_status(runtime, fresh or job)


@router.get(
    "/task-status/stream/{task_id}",
    response_class=EventSourceResponse,
    responses={
        **ERRORS,
        **NOT_YOURS,
        200: {
            "description": "one event per change, `data:` as in GET /task-status; ends after a "
            "terminal status. A Redis outage of up to SSE_OUTAGE_S (default 30 s) is ridden out: "
            "keep-alive comments go on and the stream resumes from its last event. Past that, or "
            "on an internal error, it ends with `event: error`, a `retry:` field (milliseconds, "
            '2,000 to 10,000) and `data: {"detail": "..."}`, without an id: reconnect '
            "with Last-Event-ID and nothing is missed",
            "content": {
                "text/event-stream": {
                    "schema": {
                        "description": "one event: its id, and data holding a TaskStatus",
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "data": {
                                "type": "string",
                                "contentMediaType": "application/json",
                                "contentSchema": {"$ref": "#/components/schemas/TaskStatus"},
                            },
                        },
                    }
                }
            },
        },
        204: {"description": "the job has ended and Last-Event-ID names its last event"},
    },
)
async def task_stream(
    task_id: TaskIdDep,
    caller: CallerDep,
    runtime: RuntimeDep,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    """Server-sent events of the job's changes; resume with Last-Event-ID."""
    job = await owned_job(runtime, caller.account, task_id)
    after = resume_point(last_event_id)
    if job.status.terminal and not await runtime.store.events_after(task_id, after):
        # The client has seen the end already: 204 tells an EventSource to stop reconnecting.
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return EventSourceResponse(
        _events(runtime, task_id, job.kind, after),
        ping=runtime.settings.sse_keepalive_s,
    )


def resume_point(last_event_id: str | None) -> str:
    """The event id to resume after: a valid Redis stream id below the largest, else "0" (from
    the start), so a garbage or out-of-range Last-Event-ID never reaches Redis."""
    match = EVENT_ID.fullmatch(last_event_id or "")
    if match is None:
        return "0"
    ms, seq = (int(part) for part in match.groups())
    if ms > MAX_PART or seq > MAX_PART or (ms, seq) == (MAX_PART, MAX_PART):
        return "0"
    return f"{ms}-{seq}"


async def _events(
    runtime: Runtime, task_id: str, kind: Kind, after: str
) -> AsyncIterator[ServerSentEvent]:
    """The job's events; a stream that cannot go on ends with `event: error`, never silently."""
    extra = {"task_id": task_id}
    try:
        async for event in _changes(runtime, task_id, kind, after):
            yield event
    except RedisAwayError as exc:
        log.warning("stream of %s ended: %s", task_id, exc, extra=extra)
        yield error_event(f"the job store is unreachable ({exc}); reconnect with Last-Event-ID")
    except Exception:  # the answer has begun: a 500 can no longer be sent, this event instead
        log.exception("stream of %s failed", task_id, extra=extra)
        yield error_event("internal error; reconnect with Last-Event-ID")


async def _changes(
    runtime: Runtime, task_id: str, kind: Kind, after: str
) -> AsyncIterator[ServerSentEvent]:
    outage = Outage(runtime.hub, runtime.settings.sse_outage_s)
    async with (
        runtime.hub.subscribe(task_id) as changed,
        runtime.places.watch(kind, task_id) as place,
    ):
        shown: TaskStatus | None = None
        while True:
            changed.clear()
            try:
                # The job before its events: a status read first is never newer than the events
                # read after it, so an end seen here is among them, or was before `after`.
                job = await runtime.store.get(task_id)
                for event_id, then in await runtime.store.events_after(task_id, after):
                    shown = await job_status(runtime, then)
                    place.told = shown.position
                    yield ServerSentEvent(data=shown.model_dump_json(), id=event_id)
                    after = event_id  # once sent: a failed read above reads this event again
                    if shown.status.terminal:
                        return
            except RedisError as exc:
                await outage.wait(exc)  # Redis away: read again from `after` once it may be back
                continue
            outage.over()
            if job is None or job.status.terminal:
                return  # expired, or its end was before `after`
            while not changed.is_set():  # the job is as it was: follow its place in line
                await _either(changed, place.changed)
                if place.changed.is_set() and not changed.is_set():
                    place.changed.clear()
                    try:
                        moved = await _placed(runtime, job, place.position)
                    except RedisError:
                        break  # the next round reads again, and waits out an outage
                    if moved is not None and shown is not None and moved_on(shown, moved):
                        # no id: a client resuming with Last-Event-ID still gets every change
                        place.told = moved.position
                        yield ServerSentEvent(data=moved.model_dump_json())
                        shown = moved


async def _placed(runtime: Runtime, job: JobRecord, position: int | None) -> TaskStatus | None:
    """A queued job's status at a new place in line, from what the stream already has."""
    if job.status is not Status.PENDING or position is None:
        return None
    return await placed_status(runtime, job, position)


def moved_on(shown: TaskStatus, now: TaskStatus) -> bool:
    """Whether a queued job's place or estimated start changed enough to tell its client: a new
    position, or a start estimate off by more than ETA_SLACK_S or a tenth of the wait."""
    if now.position != shown.position:
        return True
    before, after = shown.estimated_start_at, now.estimated_start_at
    if before is None or after is None:
        return before != after
    wait = max(0.0, after - time.time())
    return abs(after - before) > max(ETA_SLACK_S, wait / 10)


async def _either(first: asyncio.Event, second: asyncio.Event) -> None:
    """Wait until one of the two events is set."""
    waits = {asyncio.ensure_future(first.wait()), asyncio.ensure_future(second.wait())}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waits:
            waiter.cancel()
