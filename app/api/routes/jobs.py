"""Jobs: submit one, read its status, cancel it (its stream of changes: routes/stream.py)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Header, HTTPException, Request, Response, Security, status
from fastapi.exceptions import RequestValidationError
from redis.exceptions import ResponseError

from app.api.budgets import budget, payment_required
from app.api.cards import check_cards
from app.api.deps import NOT_FOUND, CallerDep, RuntimeDep, TaskIdDep, api_key_header
from app.api.responses import ERRORS, NOT_YOURS, job_status, owned_job
from app.api.routes.code import code_store
from app.api.routing import Caller, KeyedRoute, counts_own_rate, too_many_requests
from app.api.runtime import Runtime
from app.api.submissions import Submission, checked_submission
from app.auth import Account
from app.errors import IdempotencyMismatchError, from_reply
from app.fleet.needs import catalog_of
from app.fleet.routing import cheapest_price, item_kinds
from app.models import (
    EnqueueBody,
    EnqueueResponse,
    ErrorBody,
    TaskStatus,
)
from app.store.submit import NewJob, OverBudgetError, RateLimitedError, hook_args, submitted
from app.vtrr import NotReplicatedError, QueueFullError
from app.wiring.service import WEIGHT_PER_S, held_limit_weight, job_weight

log = logging.getLogger(__name__)
router = APIRouter(tags=["jobs"], route_class=KeyedRoute)
#: An Idempotency-Key's rules: 1 to IDEMPOTENCY_KEY_MAX printable ASCII characters (the submit's
#: fast path, app/api/fast_submit.py, applies the same).
IDEMPOTENCY_KEY_MAX = 255
IDEMPOTENCY_KEY_PATTERN = r"^[!-~]+$"
IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=IDEMPOTENCY_KEY_MAX,
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description="any printable ASCII text up to 255 characters, chosen by the client",
    ),
]
QUEUE_FULL_RETRY_S = 30
NO_SCRIPTS = (
    "this account may not run script jobs: its record does not say run_scripts: true "
    "(an admin sets it)"
)
NOT_REPLICATED_RETRY_S = 1


async def valid_job(body: EnqueueBody, request: Request) -> Submission:
    """The job the body asks for, if its type is known and available, its input fits and its
    duration is within the limits, and its webhook, if any, may be sent; 422 otherwise. A
    dependency, so that a refused job is not counted against the key's rate (the endpoint
    counts it, in the call that queues the job)."""
    runtime: Runtime = request.app.state.runtime
    return await checked_submission(body, runtime.job_types, runtime.settings)


ValidJob = Annotated[Submission, Depends(valid_job)]


@router.post(
    "/enqueue-task",
    response_model=EnqueueResponse,
    responses={
        **ERRORS,
        402: {
            "model": ErrorBody,
            "description": "the account's monthly budget cannot cover what the job may cost",
        },
        403: {
            "model": ErrorBody,
            "description": "a script job from an account whose record does not say run_scripts",
        },
        413: {"model": ErrorBody, "description": "body over 64 KiB"},
        422: {
            "model": ErrorBody,
            "description": "an invalid job (an unknown or unavailable type, an input that its "
            "type refuses, a duration over the limit, a webhook this deployment does not send "
            "to, `preemptible` on a job that is not a script job, a script job's `input.code` "
            "that names no code of the account's, a `gpu` need its type does not allow or that "
            "no class of the catalog meets, a count of `gpus` outside its type's range, over "
            "the account's max_running or that no host of the fleet has), a job whose "
            "GPU-seconds (gpus x duration_s) pass the account's "
            "max_held_gpu_seconds (it could never start), a body not sent as application/json, "
            "or an Idempotency-Key used before with another body",
        },
    },
    # The key's scheme, for the schema; the route class has checked the key already. The
    # Runtime and the Caller are read off the request: as dependencies, FastAPI would solve
    # three more of them on every submit.
    dependencies=[Security(api_key_header)],
)
@counts_own_rate  # in the call that writes and queues the job (submit)
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
    return accepted(await submit(runtime, caller, job, idempotency_key))


#: EnqueueResponse's fields in its order, the id to be filled in.
ACCEPTED = EnqueueResponse(task_id="").model_dump()


def accepted(job_id: str) -> Response:
    """The EnqueueResponse of a queued job, written by hand: all of it but the id is fixed, so
    there is nothing for FastAPI to validate or serialise."""
    body = orjson.dumps({**ACCEPTED, "task_id": job_id})
    return Response(body, media_type="application/json")


async def submit(
    runtime: Runtime, caller: Caller, job: Submission, idempotency_key: str | None
) -> str:
    """Write the job and queue it; its id (the first request's, for a replayed Idempotency-Key).

    One round trip to Redis: the fair queue's enqueue, with the job store's hooks (app/store/
    submit.py) counting the key's rate (see RateLimiter.counter), checking the Idempotency-Key
    and writing the record in the same atomic call. A replay gets its first job, whatever the
    quota says now, and queues nothing: that job was written and queued together. Celery's
    triggers are pushed by the queue's own script, or published here. A job that passes the
    account's max_held_gpu_seconds is refused before all that (a replay too: the limit is read
    here, not in the call), and so is a job of more cards than its account's max_running or the
    fleet's largest host allows (app/api/cards.py).
    """
    within_held_limit(caller.account, job.duration_s, job.gpus)
    await check_cards(runtime, caller.account, job)
    owner = caller.account.user_id
    job_id = str(uuid.uuid4())
    if job.code is not None:
        await claim_code(runtime, caller.account, job.code, job_id)
    new = NewJob(
        job_id,
        job.kind,
        job.duration_s,
        job_type=job.type,
        input_json=job.input_json,
        webhook=job.webhook,
        rate=runtime.limiter.counter(caller.key_digest),
        once=None if idempotency_key is None else (idempotency_key, job.fingerprint()),
        budget=budget(
            caller.account,
            runtime.settings,
            job.kind,
            job.duration_s,
            job.type,
            class_price=catalog_of(runtime.settings.gpu_classes).dearest_price(job.gpu_classes),
            gpus=job.gpus,
        ),
        preemptible=job.preemptible,
        gpu_classes=job.gpu_classes,
        gpus=job.gpus,
    )
    most = caller.account.max_queued or runtime.settings.max_queued_per_account
    try:
        job_id, created = await _admit_and_enqueue(runtime, owner, new, most)
    except RateLimitedError:
        raise too_many_requests(runtime.limiter.per_second) from None
    except OverBudgetError as exc:
        assert new.budget is not None  # only a budgeted submit is checked
        raise payment_required(exc, new.budget) from None
    except IdempotencyMismatchError:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail="this Idempotency-Key was used with a different request",
        ) from None
    except NotReplicatedError as exc:
        # Written on the primary, not yet on enough replicas: a failover now could lose it.
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            detail=f"the job is not yet safe from a failover ({exc}); send the request again "
            "with the same Idempotency-Key",
            headers={"Retry-After": str(NOT_REPLICATED_RETRY_S)},
        ) from None
    except QueueFullError:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            detail=f"this account already has {most} jobs queued in {job.kind}",
            headers={"Retry-After": str(QUEUE_FULL_RETRY_S)},
        ) from None
    if created:
        log.info("job queued", extra={"task_id": job_id, "account": owner, "queue": job.kind})
    return job_id


def within_held_limit(account: Account, duration_s: float, gpus: int = 1) -> None:
    """A 422 for a job whose own GPU-seconds, as its fair queue weighs it (its cards times its
    seconds, at least 1 s), pass its account's max_held_gpu_seconds: the queue could never
    start it. It names the limit."""
    limit = account.max_held_gpu_seconds
    if limit is None:
        return
    weight = job_weight(duration_s) * gpus
    if weight > held_limit_weight(limit):  # as the fair queue compares them: GPU-milliseconds
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail=f"this job's {weight / WEIGHT_PER_S:g} GPU-seconds pass the account's "
            f"max_held_gpu_seconds ({limit:g})",
        )


async def claim_code(runtime: Runtime, account: Account, code_id: str, job_id: str) -> None:
    """A script job's checks: a 403 unless the account may run scripts, a 422 naming
    `input.code` unless it owns that code. The job is then recorded as needing the code, which
    keeps it from the sweep (app/code/sweep.py) until the job ends; a submit refused after this
    leaves a claim that the sweep takes out."""
    if not account.run_scripts:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=NO_SCRIPTS)
    if not await code_store(runtime).claim(account.user_id, code_id, job_id):
        message = "no code of this account's has this id (POST /code uploads it)"
        error = {"type": "code_not_found", "loc": ("body", "input", "code"), "msg": message}
        raise RequestValidationError([error])


async def _admit_and_enqueue(
    runtime: Runtime, owner: str, new: NewJob, most: int
) -> tuple[str, bool]:
    """The one call: (the job's id, whether it was created); the store's hooks' error replies
    become the store's exceptions. The triggers it asks for are published before the answer."""
    catalog = catalog_of(runtime.settings.gpu_classes)
    kinds = item_kinds(catalog, new.gpu_classes)
    price = cheapest_price(catalog, kinds)
    item = runtime.service.job_item(new.kind, new.job_id, new.duration_s, kinds, price, new.gpus)
    args = hook_args(owner, new, runtime.settings)
    try:
        admitted = await runtime.queues[new.kind].admit_and_enqueue(
            owner, [item], args, max_queued=most
        )
    except ResponseError as exc:
        raise from_reply(exc) from None
    if admitted.triggers:
        publish = runtime.service.queues[new.kind].publish_triggers
        await asyncio.to_thread(publish, admitted.triggers)  # Celery's publish blocks the loop
    if kinds and admitted.queued:  # a mixed fleet: wake a card of each class it may run on
        await asyncio.to_thread(runtime.service.queues[new.kind].trigger_kinds, kinds)
    return submitted(new, admitted)


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
        # a preempted job waiting in line has a checkpoint that nobody will read now
        await asyncio.to_thread(runtime.service.forget_checkpoint, task_id)
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
