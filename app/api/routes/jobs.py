"""Jobs: submit one, read its status, or stream its changes as server-sent events."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Header, HTTPException, Request, Response, Security, status
from redis.exceptions import RedisError
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask

from app.api.deps import NOT_FOUND, CallerDep, RuntimeDep, TaskIdDep, api_key_header
from app.api.live.outage import RECONNECT_MS, Outage, RedisAwayError, error_event
from app.api.live.places import Place
from app.api.responses import ERRORS, NOT_YOURS, job_status, owned_job, placed_status
from app.api.routing import Caller, KeyedRoute, counts_own_rate, too_many_requests
from app.api.runtime import Runtime
from app.api.submissions import Submission, checked_submission
from app.errors import IdempotencyMismatchError
from app.models import (
    EnqueueBody,
    EnqueueResponse,
    ErrorBody,
    Kind,
    Status,
    TaskStatus,
)
from app.store import JobRecord
from app.store.jobs import RateLimitedError
from app.store.record import JobEvent
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


def _event_shape(name: str, data: dict[str, Any], **more: Any) -> dict[str, Any]:
    """The schema of one kind of event: its type, id and JSON data. A status is sent without an
    `event:` field, which SSE reads as the type "message"."""
    properties: dict[str, Any] = {
        "event": {"const": name},
        "id": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data},
        **more,
    }
    shape = {"type": "object", "properties": properties}
    return shape if name == "message" else {**shape, "required": ["event"]}


LOG_BATCH = {
    "type": "object",
    "properties": {
        "lines": {"type": "array", "items": {"$ref": "#/components/schemas/LogLine"}},
        "dropped": {"type": "integer", "description": "lines the throttle left out of the stream"},
    },
}
STREAM_EVENT = {
    "description": "one event: a status (no `event:` field, so of type message; data holding a "
    "TaskStatus), a running job's progress or log lines, or the error that ends a stream",
    "oneOf": [
        _event_shape("message", {"$ref": "#/components/schemas/TaskStatus"}),
        _event_shape("progress", {"$ref": "#/components/schemas/Progress"}),
        _event_shape("log", LOG_BATCH),
        _event_shape(
            "error",
            {"$ref": "#/components/schemas/ErrorBody"},
            retry={"type": "integer", "minimum": RECONNECT_MS[0], "maximum": RECONNECT_MS[1]},
        ),
    ],
}


async def valid_job(body: EnqueueBody, request: Request) -> Submission:
    """The job the body asks for, if its type is known and available, its input fits and its
    duration is within the limits, and its webhook, if any, may be sent; 422 otherwise. A
    dependency, so that a refused job is not counted against the key's rate (the endpoint
    counts it, in create.lua)."""
    runtime: Runtime = request.app.state.runtime
    return await checked_submission(body, runtime.job_types, runtime.settings)


ValidJob = Annotated[Submission, Depends(valid_job)]


@router.post(
    "/enqueue-task",
    response_model=EnqueueResponse,
    responses={
        **ERRORS,
        413: {"model": ErrorBody, "description": "body over 64 KiB"},
        422: {
            "model": ErrorBody,
            "description": "an invalid job (an unknown or unavailable type, an input that its "
            "type refuses, a duration over the limit, a webhook this deployment does not send "
            "to), a body not sent as application/json, or an Idempotency-Key used before with "
            "another body",
        },
    },
    # The key's scheme, for the schema; the route class has checked the key already. The
    # Runtime and the Caller are read off the request: as dependencies, FastAPI would solve
    # three more of them on every submit.
    dependencies=[Security(api_key_header)],
)
@counts_own_rate  # in create.lua, with the job's record
async def enqueue_task(
    job: ValidJob, request: Request, idempotency_key: IdempotencyKeyHeader = None
) -> Response:
    """Queue a job for the caller's account in the short or long fair queue: a job of a
    registered type (GET /job-types) with its input, or, with the body {"kind", "duration_s"},
    a job of the built-in type burn.

    With an Idempotency-Key, repeating the request returns the first request's task instead of
    queueing another; the same key with a different body is a 422.
    """
    runtime: Runtime = request.app.state.runtime
    caller: Caller = request.state.caller
    job_id = await submit(runtime, caller, job, idempotency_key)
    # Once the answer has gone: the job leaves the unqueued list, with those of other submits.
    return accepted(job_id, BackgroundTask(runtime.store.marks.flush))


#: EnqueueResponse's fields in its order, the id to be filled in.
ACCEPTED = EnqueueResponse(task_id="").model_dump()


def accepted(job_id: str, background: BackgroundTask | None = None) -> Response:
    """The EnqueueResponse of a queued job, written by hand: all of it but the id is fixed, so
    there is nothing for FastAPI to validate or serialise."""
    body = orjson.dumps({**ACCEPTED, "task_id": job_id})
    return Response(body, media_type="application/json", background=background)


async def submit(
    runtime: Runtime, caller: Caller, job: Submission, idempotency_key: str | None
) -> str:
    """Write the job and queue it; its id (the first request's, for a replayed Idempotency-Key).

    Two round trips to Redis, one after the other: create.lua (the key's rate count and the
    record, see RateLimiter.counter) and the fair queue's enqueue. The job is only noted as
    queued here; it leaves the unqueued list at the store's next `marks.flush()` (QueuedMarks),
    and Celery's triggers are pushed by the queue's own script. (One round trip would need the
    fair queue to run its enqueue inside another script, which it does not offer.)
    """
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
            webhook=job.webhook,
            rate=runtime.limiter.counter(caller.key_digest),
        )
    except RateLimitedError:
        raise too_many_requests(runtime.limiter.per_second) from None
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
    return job_id


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
    runtime.store.queued(job_id)
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
            "description": "one unnamed event per change, `data:` as in GET /task-status; ends "
            "after a terminal status. Between them, named events report a running job: `event: "
            'progress` with `data: {"fraction", "message"}` (as the status\'s `progress`), and '
            '`event: log` with `data: {"lines": [{"at", "stream", "text"}], "dropped": N}`, '
            "its new log lines batched a few times a second (N lines left out of the stream by "
            "that throttle; GET /tasks/{task_id}/logs has them all). Every event but keep-alives "
            "and `event: error` has an id, and a stream opened late replays them from the start. "
            "A Redis outage of up to SSE_OUTAGE_S (default 30 s) is ridden out: "
            "keep-alive comments go on and the stream resumes from its last event. Past that, or "
            "on an internal error, it ends with `event: error`, a `retry:` field (milliseconds, "
            '2,000 to 10,000) and `data: {"detail": "..."}`, without an id: reconnect '
            "with Last-Event-ID and nothing is missed",
            "content": {
                "text/event-stream": {"schema": STREAM_EVENT},
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


@dataclass
class _Seen:
    """How far a stream has got: the last event sent, the last status shown, whether it ended."""

    after: str
    shown: TaskStatus | None = None
    ended: bool = False


async def _changes(
    runtime: Runtime, task_id: str, kind: Kind, after: str
) -> AsyncIterator[ServerSentEvent]:
    outage = Outage(runtime.hub, runtime.settings.sse_outage_s)
    seen = _Seen(after)
    async with (
        runtime.hub.subscribe(task_id) as changed,
        runtime.places.watch(kind, task_id) as place,
    ):
        while True:
            changed.clear()
            try:
                # The job before its events: a status read first is never newer than the events
                # read after it, so an end seen here is among them, or was before `after`.
                job = await runtime.store.get(task_id)
                async for event in _replay(runtime, task_id, seen, place):
                    yield event
            except RedisError as exc:
                await outage.wait(exc)  # Redis away: read again from `after` once it may be back
                continue
            outage.over()
            if seen.ended or job is None or job.status.terminal:
                return  # ended now, expired, or its end was before `after`
            async for event in _follow_place(runtime, job, seen, changed, place):
                yield event


async def _replay(
    runtime: Runtime, task_id: str, seen: _Seen, place: Place
) -> AsyncIterator[ServerSentEvent]:
    """The events after seen.after, up to a terminal status (then seen.ended)."""
    for event_id, then in await runtime.store.events_after(task_id, seen.after):
        if isinstance(then, JobEvent):
            # a report: named, so that a client that knows only statuses can tell it apart
            yield ServerSentEvent(data=then.data, event=then.name, id=event_id)
            seen.after = event_id
            continue
        seen.shown = await job_status(runtime, then)
        place.told = seen.shown.position
        yield ServerSentEvent(data=seen.shown.model_dump_json(), id=event_id)
        seen.after = event_id  # once sent: a failed read reads this event again
        if seen.shown.status.terminal:
            seen.ended = True
            return


async def _follow_place(
    runtime: Runtime, job: JobRecord, seen: _Seen, changed: asyncio.Event, place: Place
) -> AsyncIterator[ServerSentEvent]:
    """Until the job changes, its new places in line while it is queued."""
    while not changed.is_set():
        await _either(changed, place.changed)
        if not place.changed.is_set() or changed.is_set():
            continue
        place.changed.clear()
        try:
            moved = await _placed(runtime, job, place.position)
        except RedisError:
            return  # the next round reads again, and waits out an outage
        if moved is not None and seen.shown is not None and moved_on(seen.shown, moved):
            # no id: a client resuming with Last-Event-ID still gets every change
            place.told = moved.position
            yield ServerSentEvent(data=moved.model_dump_json())
            seen.shown = moved


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
