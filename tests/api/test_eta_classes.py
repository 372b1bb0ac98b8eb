"""Start estimates in a mixed fleet, on a real Redis: a job counts only the workers of the
classes it may run on, and the jobs queued in the pools' lines count as queued."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio as aioredis

from app.api.clock import RedisClock
from app.api.live.estimates import Estimator
from app.store.keys import WORKERS
from app.store.workers import Seen
from app.vtrr import FairQueue, Item
from app.wiring.service import job_weight

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis_url)
    yield c
    await c.aclose()


def card(r: redis.Redis, name: str, gpu_class: str, busy_for_s: float | None) -> None:
    now = time.time()
    busy = None if busy_for_s is None else now + busy_for_s
    seen = Seen(name, ("short",), now, busy, host="h1", gpu_class=gpu_class, memory_gb=24.0)
    r.hset(WORKERS, name, seen.encode())


async def test_a_job_counts_only_the_cards_of_its_classes(
    r: redis.Redis, client: aioredis.Redis
) -> None:
    card(r, "big0@h1", "big", busy_for_s=300)  # the only big card is busy for five minutes
    card(r, "small0@h1", "small", busy_for_s=None)  # a small one is free now
    estimator = Estimator(client, RedisClock(client), 10.0)
    before = time.time()
    anywhere = await estimator.start_at("short", 0, 1.0)
    big_only = await estimator.start_at("short", 0, 1.0, ("big",))
    assert anywhere is not None and big_only is not None
    assert anywhere - before < 60  # the free small card
    assert big_only - before > 240  # the busy big card, the only one it may use
    assert await estimator.start_at("short", 0, 1.0, ("tiny",)) is None  # no such card is up


async def test_jobs_in_the_pools_lines_count_as_queued(
    r: redis.Redis, client: aioredis.Redis
) -> None:
    items = [Item("{}", weight=job_weight(5.0), kinds=("big", "small")) for _ in range(4)]
    FairQueue(r, "short").enqueue("account", items)
    load = await Estimator(client, RedisClock(client), 10.0).load("short", fresh=True)
    assert load.line.jobs == 4
    assert load.line.seconds == 20.0
