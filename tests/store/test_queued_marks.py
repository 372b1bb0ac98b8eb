"""QueuedMarks: jobs noted as queued leave the unqueued list in shared writes, and an outage only
leaves them there for the sweep."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from app.dev.redis_server import free_port
from app.store.jobs import QueuedMarks
from app.store.keys import UNQUEUED
from tests.api.helpers import RoundTrips

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    opened = aioredis.Redis.from_url(redis_url)
    await opened.ping()  # its connection open before anything is counted
    yield opened
    await opened.aclose()


async def test_flushes_under_way_together_write_their_notes_once(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    r.zadd(UNQUEUED, {"a": 1, "b": 2, "c": 3, "other": 4})
    marks = QueuedMarks(client)
    for job_id in ("a", "b", "c"):
        marks.note(job_id)

    trips = RoundTrips(r)
    await asyncio.gather(marks.flush(), marks.flush(), marks.flush())

    assert trips.count() == 1  # one ZREM; the later flushes found nothing left
    assert r.zrange(UNQUEUED, 0, -1) == [b"other"]


async def test_a_flush_waits_for_the_write_under_way_then_writes_the_later_notes(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    r.zadd(UNQUEUED, {"a": 1, "b": 2})
    marks = QueuedMarks(client)
    marks.note("a")
    first = asyncio.create_task(marks.flush())
    await asyncio.sleep(0)  # the first flush has taken "a" and is writing it
    marks.note("b")
    await marks.flush()
    assert first.done()
    assert r.zcard(UNQUEUED) == 0


async def test_a_flush_with_nothing_noted_sends_nothing(
    client: aioredis.Redis, r: redis.Redis
) -> None:
    trips = RoundTrips(r)
    await QueuedMarks(client).flush()
    assert trips.count() == 0


async def test_a_flush_while_redis_is_away_leaves_the_jobs_to_the_sweep(
    caplog: pytest.LogCaptureFixture,
) -> None:
    away = aioredis.Redis(port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    marks = QueuedMarks(away)
    marks.note("a")
    caplog.set_level(logging.WARNING, logger="app.store.jobs")
    await marks.flush()  # no raise: the answer has gone already
    assert "1 queued jobs stay on the unqueued list for the sweep" in caplog.text
    await away.aclose()
