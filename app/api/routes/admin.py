"""Operators' endpoints under /admin: see the queues, promote a job, return a stale lease, drop a
queue. Only accounts with the admin flag reach them; to anyone else (no key included) they
answer the same 404 as a path that does not exist. Every action is logged with who did it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Request, Response, status
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.admin_models import (
    AccountQueued,
    DropRequest,
    DropResult,
    FleetClass,
    FleetHost,
    FleetView,
    QueuesView,
    QueueView,
    WorkerView,
)
from app.api import schema
from app.api.deps import CallerDep, RuntimeDep, TaskIdDep
from app.api.responses import ERRORS, NOT_YOURS, any_job, job_status, json_error
from app.api.routing import HIDDEN, AdminRoute, Caller, authenticated
from app.api.runtime import Runtime
from app.fleet import view as fleet
from app.fleet.catalog import Catalog, CatalogError
from app.models import KINDS, ErrorBody, Kind, Status, TaskStatus
from app.store import JobRecord
from app.store import workers as heartbeats
from app.store.keys import MOVES, WORKERS
from app.wiring.service import fairness_lag_s

log = logging.getLogger(__name__)
TOP_ACCOUNTS = 10


def is_admin(request: Request) -> bool:
    """Whether the request carries an admin's key."""
    caller = authenticated(request)
    return caller is not None and caller.account.admin


async def hide_wrong_methods(request: Request, exc: Exception) -> Response:
    """A 405 under /admin would tell a non-admin that the path exists: answer 404 instead."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED and not is_admin(request):
        exc = HTTPException(status.HTTP_404_NOT_FOUND, detail=HIDDEN)
    return await json_error(request, exc)


router = APIRouter(prefix="/admin", tags=["admin"], route_class=AdminRoute)
HIDDEN_404: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "not an admin key, or no such task"},
}
RESPONSES = {**{k: v for k, v in ERRORS.items() if k != 401}, **HIDDEN_404}


AdminDep = CallerDep  # an admin's, once AdminRoute has let the request through
QueueName = Annotated[Kind, Path(description="short or long")]


@router.get("/openapi.json", include_in_schema=False)
async def admin_schema(request: Request, admin: AdminDep) -> dict[str, Any]:
    """The whole OpenAPI schema, the admin operations included (the public one leaves them out)."""
    return schema.whole(request.app)


@router.get("/queues", response_model=QueuesView, responses=RESPONSES)
async def queues(admin: AdminDep, runtime: RuntimeDep) -> QueuesView:
    """Each queue: jobs queued (and how many of them their account's limits hold back now) and
    in flight, live workers, the fairness lag, the accounts with most jobs queued (each with
    its jobs held back), and the queue's counters; each worker; and the fleet by host and by
    class."""
    views = await asyncio.gather(*(_view(runtime, kind) for kind in KINDS))
    seconds, micros = await runtime.redis.time()
    now = seconds + micros / 1e6
    seen = heartbeats.parse(await runtime.redis.hgetall(WORKERS))  # one field per GPU
    return QueuesView(
        queues=list(views),
        workers=_workers(runtime, seen, now),
        fleet=await _fleet(runtime, now),
    )


def _workers(runtime: Runtime, seen: list[heartbeats.Seen], now: float) -> list[WorkerView]:
    """Every worker's last heartbeat of the last day."""
    every = runtime.settings.heartbeat_seconds
    beating = {w.name for kind in KINDS for w in heartbeats.alive(seen, kind, now, every)}
    return [
        WorkerView(
            name=w.name,
            queues=list(w.queues),
            host=w.host,
            gpu_class=w.gpu_class,
            memory_gb=w.memory_gb,
            last_seen=w.seen,
            alive=w.name in beating,
            busy_until=w.busy_until,
            broken=w.broken,
        )
        for w in sorted(seen, key=lambda w: w.name)
        if w.seen >= now - heartbeats.FORGET_S
    ]


async def _fleet(runtime: Runtime, now: float) -> FleetView:
    """The fleet (app/fleet/view.py) by host and by class, with every class of the catalog."""
    settings = runtime.settings
    seen = await fleet.live_fleet_async(runtime.redis, settings.fleet_ttl_s, now)
    try:  # GPU_CLASSES may name a file: read off the event loop
        catalog = await asyncio.to_thread(Catalog.from_setting, settings.gpu_classes)
    except CatalogError as exc:  # checked at start; a file changed since: show what is heard
        log.warning("the fleet's view leaves the catalog out: %s", exc)
        catalog = Catalog.single()
    found = fleet.summary(seen, catalog, settings.fleet_ttl_s, now, settings.heartbeat_seconds)
    return FleetView(
        ttl_s=settings.fleet_ttl_s,
        hosts=[
            FleetHost(
                host=h.host,
                gpu_class=h.gpu_class,
                memory_gb=h.memory_gb,
                workers=h.workers,
                alive=h.alive,
                busy=h.busy,
            )
            for h in found.hosts
        ],
        classes=[
            FleetClass(
                gpu_class=c.gpu_class,
                memory_gb=c.memory_gb,
                price=c.price,
                hosts=len(c.hosts),
                workers=c.workers,
                alive=c.alive,
                busy=c.busy,
            )
            for c in found.classes
        ],
    )


async def _view(runtime: Runtime, kind: Kind) -> QueueView:
    queue = runtime.service.queues[kind]  # the sync queue, in a thread: admin reads are rare
    top, lag, stats = await asyncio.gather(
        asyncio.to_thread(queue.top_partitions, TOP_ACCOUNTS),
        asyncio.to_thread(fairness_lag_s, queue),
        asyncio.to_thread(queue.stats),
    )
    load = await runtime.estimator.load(kind, fresh=True)
    held = await asyncio.to_thread(queue.held_back)
    # the busiest accounts only (TOP_ACCOUNTS): one pipeline each, whether its limits hold it
    holds = await asyncio.gather(*(runtime.queues[kind].hold(p) for p, _ in top))
    return QueueView(
        name=kind,
        queued=await runtime.queues[kind].length(),
        in_flight=await runtime.queues[kind].pending(),
        workers=load.workers,
        held_by_limit=held,
        fairness_lag_s=lag,
        top_accounts=[
            AccountQueued(user_id=p, queued=n, held_by_limit=0 if hold is None else n)
            for (p, n), hold in zip(top, holds, strict=True)
        ],
        stats=stats,
    )


@router.post(
    "/tasks/{task_id}/promote",
    response_model=TaskStatus,
    responses={**RESPONSES, **NOT_YOURS, 409: {"model": ErrorBody, "description": "not queued"}},
)
async def promote(task_id: TaskIdDep, admin: AdminDep, runtime: RuntimeDep) -> TaskStatus:
    """Move a queued job (anyone's) to the front of its queue."""
    job = await any_job(runtime, task_id)
    kind = job.kind
    if not await runtime.queues[kind].promote(task_id):
        raise HTTPException(status.HTTP_409_CONFLICT, detail=f"the task is {job.status}")
    await runtime.redis.publish(MOVES, kind)
    log.info("admin promoted a job", extra=_who(admin, job))
    return await job_status(runtime, job)


@router.post(
    "/tasks/{task_id}/release",
    response_model=TaskStatus,
    responses={**RESPONSES, **NOT_YOURS, 409: {"model": ErrorBody, "description": "not running"}},
)
async def release(task_id: TaskIdDep, admin: AdminDep, runtime: RuntimeDep) -> TaskStatus:
    """Return a running job's lease to the front of its queue now, without waiting for it to
    expire (its worker is gone or stuck); the job is PENDING again and the next free worker
    runs it. The old run, if it is still alive, can no longer finish it."""
    job = await any_job(runtime, task_id)
    kind = job.kind
    token = job.token or ""
    released = job.status is Status.STARTED and await asyncio.to_thread(
        runtime.service.queues[kind].release, task_id, token
    )
    if not released:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=f"the task is {job.status}")
    await runtime.store.requeued(task_id, token)  # PENDING again, unless a worker took it already
    log.info("admin released a lease", extra=_who(admin, job))
    return await job_status(runtime, await any_job(runtime, task_id))


async def confirmed(name: QueueName, body: DropRequest) -> Kind:
    """The queue to drop, if the body repeats its name; 422 otherwise, before anything counts."""
    if body.confirm != name:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail=f'confirm must repeat the queue\'s name: {{"confirm": "{name}"}}',
        )
    return name


ConfirmedQueue = Annotated[Kind, Depends(confirmed)]


@router.post(
    "/queues/{name}/drop",
    response_model=DropResult,
    responses={
        **RESPONSES,
        422: {"model": ErrorBody, "description": "no such queue, or confirm is not its name"},
    },
)
async def drop(name: ConfirmedQueue, admin: AdminDep, runtime: RuntimeDep) -> DropResult:
    """Empty a queue: its queued jobs and its running ones end REVOKED, unbilled (an operator
    stopped them: see "Who pays" in the README); the running ones' workers stop them. The queue's
    counters are kept. The body must repeat the queue's name."""
    dropped = await asyncio.to_thread(runtime.service.queues[name].drop, name)
    counts = {"dropped": 0, "stopped": 0}
    for task_id in [*dropped.queued, *dropped.in_flight]:
        # each owner hears of it through the job's stream
        outcome = await runtime.store.revoke(task_id, by="operator")
        if outcome == "revoked":  # queued, or leased and not started yet
            counts["dropped"] += 1
        elif outcome == "stopped":
            counts["stopped"] += 1
        if outcome in ("revoked", "stopped"):  # ended: its checkpoint, if any, goes
            await asyncio.to_thread(runtime.service.forget_checkpoint, task_id)
    await runtime.redis.publish(MOVES, name)
    log.warning(
        "admin dropped a queue",
        extra={"account": admin.account.user_id, "queue": name, **counts},
    )
    return DropResult(queue=name, **counts)


def _who(admin: Caller, job: JobRecord) -> dict[str, str]:
    return {"account": admin.account.user_id, "task_id": job.task_id, "owner": job.owner}
