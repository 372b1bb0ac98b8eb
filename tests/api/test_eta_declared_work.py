"""Start estimates from the declared work ahead and the workers' other queue, on a real Redis:
a burst of tiny jobs ahead counts as tiny jobs, and a worker that also serves the long queue
makes a short job wait for the long jobs it lets through."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio as aioredis

from app.api.clock import RedisClock
from app.api.live.estimates import Estimator
from app.store.keys import METRICS, WORKERS
from app.vtrr import FairQueue, Item
from app.wiring.service import job_weight

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis_url)
    yield c
    await c.aclose()


def queue_jobs(r: redis.Redis, kind: str, durations: list[float]) -> None:
    """Jobs queued as the API queues them: weight = declared GPU-ms, at least 1 s."""
    items = [Item("{}", weight=job_weight(d)) for d in durations]
    FairQueue(r, kind).enqueue("account", items)


def worker(r: redis.Redis, name: str, queues: list[str]) -> None:
    """A live, idle worker's heartbeat."""
    entry = {"queues": queues, "seen": time.time(), "busy_until": None}
    r.hset(WORKERS, name, json.dumps(entry))


async def test_a_burst_of_tiny_jobs_ahead_does_not_push_a_later_estimate(
    r: redis.Redis, client: aioredis.Redis
) -> None:
    r.hset(METRICS, "run_ewma:short", 60.0)  # the jobs that ran before were a minute long
    worker(r, "cpu1@h", ["short"])
    queue_jobs(r, "short", [0.5] * 20 + [60.0])  # a burst of tiny jobs, then this one
    before = time.time()
    start = await Estimator(client, RedisClock(client), 10.0).start_at("short", 20, 60.0)
    assert start is not None
    assert start - before < 30  # about 20 s of declared work ahead, not 20 runs of a minute


async def test_a_job_behind_long_ones_on_a_shared_worker_starts_later_than_on_its_own(
    r: redis.Redis, client: aioredis.Redis
) -> None:
    queue_jobs(r, "short", [1.0] * 7)
    queue_jobs(r, "long", [600.0, 600.0])
    worker(r, "cpu1@h", ["short"])
    alone = await Estimator(client, RedisClock(client), 10.0).start_at("short", 6, 1.0)
    worker(r, "cpu1@h", ["short", "long"])
    shared = await Estimator(client, RedisClock(client), 10.0).start_at("short", 6, 1.0)
    assert alone is not None and shared is not None
    assert shared - alone > 600  # at least one long job goes between (long's turn, 1 in 4)
