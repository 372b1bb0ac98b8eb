"""A job's changes as server-sent events: GET /task-status/stream/{task_id}, with replay from
Last-Event-ID, the queued job's place as it moves, a Redis outage ridden out, and an end as soon
as the caller's key is revoked or its account disabled."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Header, Response, status
from redis.exceptions import RedisError
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.deps import CallerDep, RuntimeDep, TaskIdDep
from app.api.live.outage import RECONNECT_MS, Outage, RedisAwayError, error_event
from app.api.live.places import Place
from app.api.responses import ERRORS, NOT_YOURS, job_status, owned_job, placed_status
from app.api.routing import Caller, KeyedRoute
from app.api.runtime import Runtime
from app.models import Kind, Status, TaskStatus
from app.store import JobRecord
from app.store.record import JobEvent

log = logging.getLogger(__name__)
router = APIRouter(tags=["jobs"], route_class=KeyedRoute)
EVENT_ID = re.compile(r"(\d{1,20})-(\d{1,20})")
MAX_PART = 2**64 - 1
ETA_SLACK_S = 5.0  # a guess at when some of the account's jobs will have started
REVOKED = "the API key was revoked or its account disabled"


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
PREEMPTED = {
    "type": "object",
    "properties": {
        "preemptions": {"type": "integer", "description": "the job's preemptions, this one in"},
        "seconds": {"type": "number", "description": "what the run that yielded measured"},
        "ran_s": {"type": "number", "description": "what all the job's runs measured so far"},
    },
}
STREAM_EVENT = {
    "description": "one event: a status (no `event:` field, so of type message; data holding a "
    "TaskStatus), a running job's progress or log lines, a preemption, or the error that ends "
    "a stream",
    "oneOf": [
        _event_shape("message", {"$ref": "#/components/schemas/TaskStatus"}),
        _event_shape("progress", {"$ref": "#/components/schemas/Progress"}),
        _event_shape("log", LOG_BATCH),
        _event_shape("preempted", PREEMPTED),
        _event_shape(
            "error",
            {"$ref": "#/components/schemas/ErrorBody"},
            retry={"type": "integer", "minimum": RECONNECT_MS[0], "maximum": RECONNECT_MS[1]},
        ),
    ],
}


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
            "that throttle; GET /tasks/{task_id}/logs has them all), and `event: preempted` "
            'with `data: {"preemptions", "seconds", "ran_s"}` when a run yielded its GPU to a '
            "job owed one (a PENDING status follows: the job resumes later). Every event but "
            "keep-alives and `event: error` has an id, and a stream opened late replays them "
            "from the start. A Redis outage of up to SSE_OUTAGE_S (default 30 s) is ridden out: "
            "keep-alive comments go on and the stream resumes from its last event. Past that, or "
            "on an internal error, it ends with `event: error`, a `retry:` field (milliseconds, "
            '2,000 to 10,000) and `data: {"detail": "..."}`, without an id: reconnect '
            "with Last-Event-ID and nothing is missed. A stream whose API key is revoked, or "
            "whose account is disabled, ends with `event: error` too, within a second of the "
            f'change: `data: {{"detail": "{REVOKED}"}}`',
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
        _events(runtime, caller, task_id, job.kind, after),
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
    runtime: Runtime, caller: Caller, task_id: str, kind: Kind, after: str
) -> AsyncIterator[ServerSentEvent]:
    """The job's events; a stream that cannot go on ends with `event: error`, never silently."""
    extra = {"task_id": task_id}
    try:
        async for event in _changes(runtime, caller, task_id, kind, after):
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
    runtime: Runtime, caller: Caller, task_id: str, kind: Kind, after: str
) -> AsyncIterator[ServerSentEvent]:
    outage = Outage(runtime.hub, runtime.settings.sse_outage_s)
    seen = _Seen(after)
    key, user_id = caller.key_digest, caller.account.user_id
    async with (
        runtime.hub.subscribe(task_id) as changed,
        runtime.places.watch(kind, task_id) as place,
    ):
        # A revocation sets `changed` too, which ends the wait of the round in progress.
        with runtime.accounts.watch(key, user_id, changed) as watch:
            while not watch.revoked:
                changed.clear()
                try:
                    # The job before its events: a status read first is never newer than the
                    # events read after it, so an end seen here is among them, or before `after`.
                    job = await runtime.store.get(task_id)
                    async for event in _replay(runtime, task_id, seen, place):
                        yield event
                except RedisError as exc:
                    await outage.wait(exc)  # Redis away: read again from `after` once back
                    continue
                outage.over()
                if seen.ended or job is None or job.status.terminal:
                    return  # ended now, expired, or its end was before `after`
                async for event in _follow_place(runtime, job, seen, changed, place):
                    yield event
    log.info("stream of %s ended: %s", task_id, REVOKED, extra={"task_id": task_id})
    yield error_event(REVOKED)


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
        shown = seen.shown
        if moved is not None and shown is not None and moved_on(shown, moved, runtime.clock.now()):
            # no id: a client resuming with Last-Event-ID still gets every change
            place.told = moved.position
            yield ServerSentEvent(data=moved.model_dump_json())
            seen.shown = moved


async def _placed(runtime: Runtime, job: JobRecord, position: int | None) -> TaskStatus | None:
    """A queued job's status at a new place in line, from what the stream already has."""
    if job.status is not Status.PENDING or position is None:
        return None
    return await placed_status(runtime, job, position)


def moved_on(shown: TaskStatus, now: TaskStatus, clock: float) -> bool:
    """Whether a queued job's place or estimated start changed enough to tell its client: a new
    position or reason to wait, or a start estimate off by more than ETA_SLACK_S or a tenth of
    the wait (from `clock`, Redis's time now)."""
    if now.position != shown.position or now.waiting_for != shown.waiting_for:
        return True
    before, after = shown.estimated_start_at, now.estimated_start_at
    if before is None or after is None:
        return before != after
    wait = max(0.0, after - clock)
    return abs(after - before) > max(ETA_SLACK_S, wait / 10)


async def _either(first: asyncio.Event, second: asyncio.Event) -> None:
    """Wait until one of the two events is set."""
    waits = {asyncio.ensure_future(first.wait()), asyncio.ensure_future(second.wait())}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waits:
            waiter.cancel()
