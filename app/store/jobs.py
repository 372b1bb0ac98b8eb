"""JobStore: the API's side of the job records (asyncio): create jobs, read them, their events,
and the billing records."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.errors import FairGPUError
from app.models import Kind, LogLine, LogStream, StoppedBy
from app.settings import Settings
from app.store.keys import (
    CHANNEL,
    JOB_PREFIX,
    METRICS,
    NO_RATE,
    RATE_TTL_S,
    STOPS,
    UNQUEUED,
    WEBHOOKS,
    billing_key,
    events_key,
    idempotency_key,
    input_key,
    job_key,
    logs_key,
    owned_key,
)
from app.store.record import JobEvent, JobRecord, decode
from app.store.scripts import AsyncScripts
from app.vtrr.wire import as_text

#: The most jobs an account's index keeps for GET /tasks (the newest).
LISTED_PER_ACCOUNT = 10_000
log = logging.getLogger(__name__)


class RateLimitedError(FairGPUError):
    """create() counted the request against its key's rate and it is over: nothing but the
    counter was written."""


class QueuedMarks:
    """Takes queued jobs off the unqueued list, several in one ZREM: a submit notes its job once
    the fair queue holds it, and flushes after its answer has gone (a background task of the
    response), so the write is not one of the round trips the client waits for.

    One flush writes at a time. The jobs noted while it writes wait for the next write, which
    the same flush makes as soon as its own is done: every flush of the meantime just waits for
    that one. A flush returns once its own notes are written. A note lost with its process, or
    in an outage, only leaves a job on the list, where the sweep finds it queued or no longer
    PENDING and just takes it off.
    """

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._noted: list[str] = []
        self._next: asyncio.Future[None] | None = None  # done once _noted is written
        self._writing: asyncio.Future[None] | None = None  # the write under way, if any

    def note(self, job_id: str) -> None:
        """The job is queued: take it off the list at the next write."""
        self._noted.append(job_id)
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()

    async def flush(self) -> None:
        """Return once every job noted so far is off the list (or left to the sweep): write
        them, unless a write is under way, whose writer writes them next."""
        if self._writing is None:
            await self._write_all()
            return
        waited = self._next or self._writing
        await asyncio.shield(waited)  # a cancelled waiter must not cancel the others' write

    async def _write_all(self) -> None:
        """Write the notes, and those made meanwhile, until there are none."""
        try:
            while self._noted:
                noted, done = self._noted, self._next
                self._noted, self._next = [], None
                writing = done or asyncio.get_running_loop().create_future()
                self._writing = writing
                try:
                    await self._write(noted)
                finally:
                    self._writing = None
                    writing.set_result(None)
        except asyncio.CancelledError:
            # The flushes waiting for the next write have lost their writer: let them go. Their
            # notes stay, for whichever flush comes next.
            if self._next is not None:
                self._next.set_result(None)
                self._next = None
            raise

    async def _write(self, noted: list[str]) -> None:
        """One ZREM; an outage leaves the jobs on the list, for the sweep."""
        try:
            await self._client.zrem(UNQUEUED, *noted)
        except (RedisError, OSError) as exc:
            left = len(noted)
            log.warning("%d queued jobs stay on the unqueued list for the sweep: %r", left, exc)


class JobStore:
    """Create, read, cancel and requeue jobs; read their events and bills."""

    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        self.redis = client
        self._ttl = settings.job_ttl_s
        self._idempotency_ttl = settings.idempotency_ttl_s
        self._scripts = AsyncScripts(client, "create", "revoke", "requeue")
        self.marks = QueuedMarks(client)

    async def create(
        self,
        job_id: str,
        owner: str,
        kind: Kind,
        duration_s: float,
        once: tuple[str, str] | None = None,
        *,
        job_type: str = "burn",
        input_json: str = "{}",
        webhook: str | None = None,
        rate: tuple[str, int] | None = None,
    ) -> tuple[str, bool]:
        """Write a new PENDING job owned by owner, of job_type with its input (JSON text) and
        the URL its final status is sent to (webhook, checked already); returns (its id, True).

        With rate = (the API key's counter for this second, requests allowed), the request is
        counted first, in the same call; over the limit, RateLimitedError, and nothing else is
        written. With once = (Idempotency-Key, request fingerprint), a key already used by this
        account for the same request returns (the first job's id, False) and writes nothing
        more; used for another request, it raises IdempotencyMismatchError. An id that exists
        already raises JobExistsError.
        """
        counter, allowed = rate if rate is not None else (NO_RATE, 0)
        keys = [job_key(job_id), events_key(job_id), UNQUEUED, owned_key(owner), input_key(job_id)]
        keys.append(counter)
        args: list[str | int] = [job_id, owner, kind, repr(duration_s), CHANNEL, self._ttl]
        args += [LISTED_PER_ACCOUNT, job_type, input_json, webhook or "", allowed]
        args.append(RATE_TTL_S)
        if once is not None:
            keys.append(idempotency_key(owner, once[0]))
            args += [once[1], self._idempotency_ttl, JOB_PREFIX]
        reply = await self._scripts.run("create", keys, args)
        outcome = as_text(reply[0])
        if outcome == "limited":
            raise RateLimitedError(f"over {allowed} requests a second")
        return (job_id, True) if outcome == "created" else (as_text(reply[1]), False)

    async def revoke(self, job_id: str, by: StoppedBy = "owner") -> str:
        """Cancel a job, as its owner or as an operator: 'revoked' (it was queued), 'stopping'
        (running, its owner's cancel: its worker is asked to stop, and bills the time it ran),
        'stopped' (running, an operator's: REVOKED now, unbilled), its final status when it had
        already ended, or 'gone'. A running job's id is published on STOPS for its worker; a job
        that ends here with a webhook goes on WEBHOOKS for the sender."""
        keys = [job_key(job_id), events_key(job_id), METRICS, WEBHOOKS]
        args: list[str | int] = [job_id, CHANNEL, self._ttl, by, STOPS]
        return as_text(await self._scripts.run("revoke", keys, args))

    async def requeued(self, job_id: str, token: str) -> bool:
        """Mark a running job PENDING again after its lease `token` went back to the queue;
        False when another run holds it already."""
        keys = [job_key(job_id), events_key(job_id)]
        args: list[str | int] = [job_id, token, CHANNEL, self._ttl]
        return bool(await self._scripts.run("requeue", keys, args))

    async def get(self, job_id: str) -> JobRecord | None:
        """The job, or None when it does not exist (or has expired)."""
        fields = await self.redis.hgetall(job_key(job_id))  # a fixed, small set of fields
        return JobRecord.parse(fields) if fields else None

    def queued(self, job_id: str) -> None:
        """Note that the job is in its fair queue now, so the sweep need not look at it: it
        leaves the unqueued list at the next `marks.flush()`, with others (QueuedMarks)."""
        self.marks.note(job_id)

    async def delete(self, job_id: str, owner: str) -> None:
        """Forget a job that could not be queued: its record, and its place in both lists, in
        one atomic round trip."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(job_key(job_id), events_key(job_id), input_key(job_id))
            pipe.zrem(UNQUEUED, job_id)
            pipe.zrem(owned_key(owner), job_id)
            await pipe.execute()

    async def events_after(self, job_id: str, after: str) -> list[tuple[str, JobRecord | JobEvent]]:
        """The job's events after the event id `after` ("0" for all), oldest first; each is the
        job as it was then, or a report of the job (progress, log lines)."""
        start = f"({after}" if after != "0" else "-"
        entries = await self.redis.xrange(events_key(job_id), min=start) or []
        return [
            (as_text(event_id), _event(fields))
            for event_id, fields in entries
            if event_id and fields
        ]

    async def logs(self, job_id: str, tail: int) -> list[LogLine]:
        """The job's last `tail` log lines, oldest first."""
        entries = await self.redis.xrevrange(logs_key(job_id), count=tail) or []
        return [_log_line(decode(fields)) for _, fields in reversed(entries) if fields]

    async def billing(self, user_id: str, limit: int) -> list[str]:
        """The account's billing records as JSON texts, newest first."""
        return [as_text(x) for x in await self.redis.lrange(billing_key(user_id), 0, limit - 1)]


def _event(raw: Mapping[Any, Any]) -> JobRecord | JobEvent:
    fields = decode(raw)
    return JobEvent.parse(fields) or JobRecord.parse(fields)


STREAMS: tuple[LogStream, ...] = ("stdout", "stderr", "log")


def _log_line(fields: Mapping[str, str]) -> LogLine:
    """A log entry as the worker writes it; a stream it does not name is its own log."""
    stream = next((name for name in STREAMS if name == fields.get("stream")), "log")
    return LogLine(at=float(fields.get("at") or 0), stream=stream, text=fields.get("text", ""))
