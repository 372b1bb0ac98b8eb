"""Jobs written as the API writes them, for tests that need a job's record: the fair queue's
enqueue with the job store's hooks (app/store/submit.py), the record and its item in one call."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from app.settings import Settings
from app.store.hooks import hooks_lua
from app.store.submit import NewJob, hook_args, submitted
from app.vtrr import Item
from app.vtrr.aio import AsyncFairQueue


async def write_job(
    client: aioredis.Redis,
    settings: Settings,
    owner: str,
    job: NewJob,
    max_queued: int | None = None,
) -> tuple[str, bool]:
    """Write and queue the job: (its id, whether this call created it)."""
    queue = AsyncFairQueue(client, job.kind, hooks_lua=hooks_lua())
    item = Item(json.dumps({"task": "test", "args": [job.job_id], "kwargs": {}}), id=job.job_id)
    args = hook_args(owner, job, settings)
    admitted = await queue.admit_and_enqueue(owner, [item], args, max_queued=max_queued)
    return submitted(job, admitted)
