"""One account's jobs, newest first, a page at a time (GET /tasks).

The account's index (`fairgpu:owned:<user>`, a sorted set by submission time) is read in
batches from a cursor; a job whose record has expired is dropped from the index as it is met.
With a status filter, a page stops after SCAN_MOST index entries even when it holds fewer than
`limit` jobs: its cursor goes on from there, so a rare status never makes one request long.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import redis.asyncio as aioredis

from app.models import Status
from app.store import JobRecord
from app.store.keys import job_key, owned_key
from app.vtrr.wire import as_text

BATCH = 100
SCAN_MOST = 1000
#: A cursor: the submission time of the last job looked at (as repr writes a Unix time), an
#: underscore, and that job's id (a UUID, as the API gives them).
CURSOR_PATTERN = (
    r"^[0-9]{1,16}\.[0-9]{1,17}_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)


class BadCursorError(ValueError):
    """A cursor that this module did not make."""


@dataclass(frozen=True)
class Cursor:
    """Where a page ends: the submission time and id of the last job looked at."""

    score: float
    job_id: str

    def encode(self) -> str:
        """The text a client passes back: `<submission time>_<job id>` (repr keeps the time
        exact, so the page goes on exactly after this job)."""
        return f"{self.score!r}_{self.job_id}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """The cursor a client passed back; BadCursorError when it does not have our form.

        Every text of the form is a place in the account's index, so any of them is a valid
        cursor: the schema's pattern (CURSOR_PATTERN) says exactly what is accepted."""
        if re.fullmatch(CURSOR_PATTERN, text) is None:
            raise BadCursorError("cursor is not one this server gave out")
        score, job_id = text.split("_")
        return cls(float(score), job_id)


async def page(
    client: aioredis.Redis,
    user_id: str,
    limit: int,
    status: Status | None = None,
    after: Cursor | None = None,
) -> tuple[list[JobRecord], Cursor | None]:
    """Up to `limit` of the account's jobs after the cursor, newest first, and the next cursor
    (None when the index has no more)."""
    found: list[JobRecord] = []
    scanned = 0
    while len(found) < limit and scanned < SCAN_MOST:
        wanted = BATCH if status else limit - len(found)  # unfiltered: read only what is needed
        entries = await _entries_after(client, user_id, after, wanted)
        if not entries:
            return found, None
        async with client.pipeline(transaction=False) as pipe:
            for job_id, _ in entries:
                pipe.hgetall(job_key(job_id))  # a small, fixed set of fields
            jobs = [JobRecord.parse(fields) if fields else None for fields in await pipe.execute()]
        for (job_id, score), job in zip(entries, jobs, strict=True):
            scanned += 1
            after = Cursor(score, job_id)
            if not job:
                await client.zrem(owned_key(user_id), job_id)  # its record has expired
            elif status is None or job.status is status:
                found.append(job)
            if len(found) == limit or scanned == SCAN_MOST:
                break
    more = await _entries_after(client, user_id, after, 1)
    return found, after if more else None


async def _entries_after(
    client: aioredis.Redis, user_id: str, after: Cursor | None, count: int
) -> list[tuple[str, float]]:
    """The next index entries, newest first, strictly after the cursor. Entries with the
    cursor's own time come in descending id order, so those up to the cursor's id are skipped."""
    top: float | str = "+inf" if after is None else after.score
    raw: list[tuple[bytes, float]] = await client.zrevrangebyscore(  # type: ignore[assignment]
        owned_key(user_id), top, "-inf", start=0, num=count + BATCH, withscores=True
    )
    entries = [(as_text(member), float(score)) for member, score in raw]
    if after is not None:
        entries = [
            (job_id, score)
            for job_id, score in entries
            if score < after.score or job_id < after.job_id
        ]
    return entries[:count]
