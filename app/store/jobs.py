"""JobStore: the API's side of the job records (asyncio): read jobs, their events and the
billing records, cancel and requeue jobs. A job is written in the call that queues it
(submit.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from app.bill import Bill
from app.models import LogLine, LogStream, StoppedBy
from app.settings import Settings
from app.store.keys import (
    CHANNEL,
    LEDGER,
    METRICS,
    STOPS,
    WEBHOOKS,
    events_key,
    job_key,
    logs_key,
    usage_key,
)
from app.store.record import JobEvent, JobRecord, decode
from app.store.scripts import AsyncScripts
from app.vtrr.wire import as_text


class JobStore:
    """Read, cancel and requeue jobs; read their events and bills."""

    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        self.redis = client
        self._ttl = settings.job_ttl_s
        self._scripts = AsyncScripts(client, "revoke", "requeue")

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

    async def unwritten_bills(self, user_id: str | None = None) -> list[Bill]:
        """The bills still on their way to the SQL ledger (of one account, or every one's): the
        ledger's writers keep this short (app/ledger/outbox.py)."""
        entries = await self.redis.xrange(LEDGER) or []
        found = [Bill.read(f[b"bill"]) for _, f in entries if f and b"bill" in f]
        return [bill for bill in found if user_id is None or bill.user_id == user_id]

    async def usage(self, user_id: str) -> dict[str, int]:
        """The account's use of its monthly budgets (keys.usage_key): field -> integer."""
        raw = await self.redis.hgetall(usage_key(user_id))
        return {as_text(k): int(v) for k, v in raw.items()}


def _event(raw: Mapping[Any, Any]) -> JobRecord | JobEvent:
    fields = decode(raw)
    return JobEvent.parse(fields) or JobRecord.parse(fields)


STREAMS: tuple[LogStream, ...] = ("stdout", "stderr", "log")


def _log_line(fields: Mapping[str, str]) -> LogLine:
    """A log entry as the worker writes it; a stream it does not name is its own log."""
    stream = next((name for name in STREAMS if name == fields.get("stream")), "log")
    return LogLine(at=float(fields.get("at") or 0), stream=stream, text=fields.get("text", ""))
