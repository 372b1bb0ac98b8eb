"""Job records, ownership and status events in Redis; every key name of the service is built here.

    fairgpu:job:<id>          hash    the job: owner, kind, duration_s, status, attempts, times,
                                      worker, gpu_id, tflops, error, current lease token
    fairgpu:events:<id>       stream  one entry per change of the job, a copy of its hash
    fairgpu:billing:<user>    list    the account's billing records, newest first (JSON)
    fairgpu:billed:<id>       string  "already billed" marker, set with the record
    fairgpu:idem:<account>:<sha256 of key>
                              string  "<job id> <request fingerprint>" for an Idempotency-Key
    fairgpu:rate:<key digest>:<second>
                              string  requests made with one API key in one second
    fairgpu:owned:<user>      zset    the account's jobs by submission time (the newest
                                      LISTED_PER_ACCOUNT), for GET /tasks
    fairgpu:metrics           hash    counters and histogram buckets (see app/metrics.py)
    fairgpu:workers           hash    worker name -> its last heartbeat (see app/presence.py)
    fairgpu:changes:<id>      channel the job's id, published at every change of the job
    fairgpu:changes:moves     channel a queue's name, whenever its order changes
    fairgpu:unqueued          zset    jobs created and not yet known to be queued, by time

Job hashes and event streams expire job_ttl_s after their last change. Transitions are Lua
scripts in app/lua/, each writing the new state, its event and its notification atomically.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from app.billing import Charge
from app.models import JobResult, Status, TaskStatus
from app.settings import Kind, Settings
from app.vtrr.queue import as_text
from app.vtrr.scripts import source

LUA_DIR = Path(__file__).with_name("lua")
CHANNEL = "fairgpu:changes"  # the scripts publish on channel .. ':' .. job id, and on MOVES
MOVES = f"{CHANNEL}:moves"
METRICS = "fairgpu:metrics"
WORKERS = "fairgpu:workers"
LISTED_PER_ACCOUNT = 10_000
UNQUEUED = "fairgpu:unqueued"
SWEEP_BATCH = 100


JOB_PREFIX = "fairgpu:job:"


def job_key(job_id: str) -> str:
    """The hash that holds one job."""
    return f"{JOB_PREFIX}{job_id}"


def idempotency_key(user_id: str, key: str) -> str:
    """The record of one Idempotency-Key of one account (the key itself is not stored)."""
    return f"fairgpu:idem:{user_id}:{hashlib.sha256(key.encode()).hexdigest()}"


def events_key(job_id: str) -> str:
    """The stream of one job's changes."""
    return f"fairgpu:events:{job_id}"


def job_channel(job_id: str) -> str:
    """The channel a job's changes are announced on (a job id is a UUID, never "moves")."""
    return f"{CHANNEL}:{job_id}"


def rate_key(key_digest: str, second: int) -> str:
    """The counter of one API key's requests in one second."""
    return f"fairgpu:rate:{key_digest}:{second}"


def billing_key(user_id: str) -> str:
    """The list of one account's billing records."""
    return f"fairgpu:billing:{user_id}"


def owned_key(user_id: str) -> str:
    """The index of one account's jobs, by submission time."""
    return f"fairgpu:owned:{user_id}"


def billed_key(job_id: str) -> str:
    """The marker that says a job has been billed."""
    return f"fairgpu:billed:{job_id}"


def decode(fields: Mapping[Any, Any]) -> dict[str, str]:
    """A Redis hash (or stream entry) as str -> str."""
    return {as_text(k): as_text(v) for k, v in fields.items()}


def _number(job: Mapping[str, str], field: str) -> float | None:
    value = job.get(field)
    return float(value) if value else None


def status_of(
    job: Mapping[str, str], position: int | None = None, estimated_start_at: float | None = None
) -> TaskStatus:
    """The status a client sees, from a job's hash (or a copy of it in an event)."""
    status = Status(job["status"])
    result = None
    if status is Status.SUCCESS or job.get("started_at"):
        gpu = job.get("gpu_id")
        result = JobResult(
            worker=job.get("worker"),
            gpu_id=int(gpu) if gpu else None,
            duration_s=float(job["duration_s"]),
            enqueued_at=float(job["enqueued_at"]),
            started_at=_number(job, "started_at"),
            finished_at=_number(job, "finished_at"),
            tflops=_number(job, "tflops"),
        )
    return TaskStatus(
        task_id=job["task_id"],
        status=status,
        enqueued_at=_number(job, "enqueued_at"),
        result=result,
        kind=job["kind"],  # written by create.lua from a Kind
        attempts=int(job.get("attempts", "0")),
        position=position if status is Status.PENDING else None,
        estimated_start_at=estimated_start_at if status is Status.PENDING else None,
        error=job.get("error"),
        cancel_requested="cancel" in job and status is Status.STARTED,
    )


class IdempotencyMismatchError(Exception):
    """An Idempotency-Key was used again with a different request."""


@dataclass(frozen=True)
class Started:
    """What start() decided: run (with the attempt number, the owner and the asked-for
    duration, so that the worker needs no second read), or do not run."""

    run: bool
    attempt: int = 0
    reason: str = ""
    owner: str = ""
    duration_s: float = 0.0


class JobStore:
    """The API's side: create jobs, read them, their events and the billing records (asyncio)."""

    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        self.redis = client
        self._ttl = settings.job_ttl_s
        self._idempotency_ttl = settings.idempotency_ttl_s
        self._create = client.register_script(source("create", LUA_DIR))
        self._revoke = client.register_script(source("revoke", LUA_DIR))
        self._requeue = client.register_script(source("requeue", LUA_DIR))

    async def create(
        self,
        job_id: str,
        owner: str,
        kind: Kind,
        duration_s: float,
        once: tuple[str, str] | None = None,
    ) -> tuple[str, bool]:
        """Write a new PENDING job owned by owner; returns (its id, True).

        With once = (Idempotency-Key, request fingerprint), a key already used by this account
        for the same request returns (the first job's id, False) and writes nothing; used for
        another request, it raises IdempotencyMismatchError.
        """
        keys = [job_key(job_id), events_key(job_id), UNQUEUED, owned_key(owner)]
        args: list[str | int] = [job_id, owner, kind, repr(duration_s), CHANNEL, self._ttl]
        args.append(LISTED_PER_ACCOUNT)
        if once is not None:
            keys.append(idempotency_key(owner, once[0]))
            args += [once[1], self._idempotency_ttl, JOB_PREFIX]
        try:
            outcome, value = await self._create(keys=keys, args=args)
        except ResponseError as exc:
            if str(exc).startswith("IDEMPOTENCY_MISMATCH"):
                raise IdempotencyMismatchError(str(exc).split()[-1]) from None
            raise
        return (job_id, True) if as_text(outcome) == "created" else (as_text(value), False)

    async def revoke(self, job_id: str) -> str:
        """Cancel a job: 'revoked' (it was queued), 'stopping' (its worker is asked to stop),
        its final status when it had already ended, or 'gone'."""
        keys = [job_key(job_id), events_key(job_id), METRICS]
        return as_text(await self._revoke(keys=keys, args=[job_id, CHANNEL, self._ttl]))

    async def requeued(self, job_id: str, token: str) -> bool:
        """Mark a running job PENDING again after its lease `token` went back to the queue;
        False when another run holds it already."""
        keys = [job_key(job_id), events_key(job_id)]
        return bool(await self._requeue(keys=keys, args=[job_id, token, CHANNEL, self._ttl]))

    async def get(self, job_id: str) -> dict[str, str] | None:
        """The job's hash, or None when it does not exist (or has expired)."""
        fields = await self.redis.hgetall(job_key(job_id))  # a fixed, small set of fields
        return decode(fields) or None

    async def queued(self, job_id: str) -> None:
        """Note that the job is in its fair queue now: the sweep need not look at it."""
        await self.redis.zrem(UNQUEUED, job_id)

    async def delete(self, job_id: str, owner: str) -> None:
        """Forget a job that could not be queued."""
        await self.redis.delete(job_key(job_id), events_key(job_id))
        await self.redis.zrem(UNQUEUED, job_id)
        await self.redis.zrem(owned_key(owner), job_id)

    async def events_after(self, job_id: str, after: str) -> list[tuple[str, dict[str, str]]]:
        """The job's events after the event id `after` ("0" for all), oldest first."""
        start = f"({after}" if after != "0" else "-"
        entries = await self.redis.xrange(events_key(job_id), min=start) or []
        return [
            (as_text(event_id), decode(fields or {})) for event_id, fields in entries if event_id
        ]

    async def billing(self, user_id: str, limit: int) -> list[str]:
        """The account's billing records as JSON texts, newest first."""
        return [as_text(x) for x in await self.redis.lrange(billing_key(user_id), 0, limit - 1)]


class JobRecorder:
    """The worker's side: start and finish runs, fenced by the run's lease token."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.redis = client
        self._ttl = settings.job_ttl_s
        self._max_attempts = settings.max_attempts
        self._start = client.register_script(source("start", LUA_DIR))
        self._finish = client.register_script(source("finish", LUA_DIR))

    def get(self, job_id: str) -> dict[str, str] | None:
        """The job's hash, or None."""
        return decode(self.redis.hgetall(job_key(job_id))) or None

    def sweep_unqueued(self, is_known: Callable[[str, str], bool], grace_s: float) -> int:
        """Delete PENDING jobs that the API created more than grace_s ago but never queued (it
        lost Redis, or died, between its two writes); returns how many. is_known(kind, id)
        says whether a job's fair queue has it, queued or in flight. Their clients got an
        error, not a task id, so nobody waits for them."""
        seconds, micros = self.redis.time()
        cutoff = seconds + micros / 1e6 - grace_s
        removed = 0
        while True:  # in batches, each taking what it looked at off the list
            due: list[bytes] = self.redis.zrangebyscore(  # type: ignore[assignment]
                UNQUEUED, "-inf", cutoff, start=0, num=SWEEP_BATCH
            )
            for job_id in map(as_text, due):
                job = self.get(job_id)
                if job and job["status"] == "PENDING" and not is_known(job["kind"], job_id):
                    self.redis.delete(job_key(job_id), events_key(job_id))
                    self.redis.zrem(owned_key(job["owner"]), job_id)
                    removed += 1
                self.redis.zrem(UNQUEUED, job_id)
            if len(due) < SWEEP_BATCH:
                return removed

    def cancel_requested(self, job_id: str) -> bool:
        """Whether the job's owner has asked for it to stop."""
        return bool(self.redis.hexists(job_key(job_id), "cancel"))

    def start(self, job_id: str, token: str, worker: str, gpu_id: int | None) -> Started:
        """Mark the job STARTED under this lease, unless it has ended or used its attempts."""
        keys = [job_key(job_id), events_key(job_id), METRICS]
        gpu = "" if gpu_id is None else str(gpu_id)
        args: list[str | int] = [job_id, token, worker, gpu, self._max_attempts, CHANNEL, self._ttl]
        reply = [as_text(x) if isinstance(x, bytes | str) else x for x in self._start(keys, args)]
        if reply[0] == "run":
            return Started(True, int(reply[1]), owner=reply[2], duration_s=float(reply[3]))
        return Started(run=False, reason=reply[0])

    def finish(
        self,
        job_id: str,
        token: str,
        status: Status,
        *,
        charge: Charge,
        owner: str,
        error: str = "",
        tflops: float | None = None,
    ) -> bool:
        """Record the run's end (and bill a success once); False when this run no longer holds
        the job (its lease was reclaimed and another run took over)."""
        keys = [
            job_key(job_id),
            events_key(job_id),
            billing_key(owner),
            billed_key(job_id),
            METRICS,
        ]
        args = [
            job_id,
            token,
            status.value,
            error,
            "" if tflops is None else repr(tflops),
            repr(charge.cost),
            charge.description,
            repr(charge.gpu_seconds),
            CHANNEL,
            self._ttl,
        ]
        return bool(self._finish(keys, args))
