"""The API's Redis connections stay few however many streams are open: streams share the event
hub's one subscription and hold no pool connection while they wait, and the pool is bounded."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import redis

from app.api.runtime import CLIENT_NAME, HUB_CLIENT_NAME
from app.settings import Settings
from tests.api.conftest import Api
from tests.api.helpers import KEY, USERS_FILE, WAIT_S, EventReader
from tests.api.test_stream import submit

pytestmark = pytest.mark.anyio

STREAMS = 200
MOST = 20  # the pool's 16 and the hub's one, with room to spare; not a function of STREAMS


@pytest.fixture
def settings(redis_url: str) -> Settings:
    # 200 submits and 200 streams from one key in a moment: no rate limit in the way.
    return Settings(redis_url=redis_url, users_file=USERS_FILE, rate_limit_per_s=0)


def api_connections(r: redis.Redis) -> list[str]:
    """The names of the API's connections in CLIENT LIST."""
    names = [str(c.get("name", "")) for c in r.client_list()]
    return [n for n in names if n.startswith(CLIENT_NAME)]


async def test_two_hundred_open_streams_hold_a_bounded_number_of_redis_connections(
    api: Api, r: redis.Redis
) -> None:
    task_ids = [await submit(api) for _ in range(STREAMS)]
    before = len(r.client_list())
    opened, release = asyncio.Semaphore(0), asyncio.Event()

    async def follow(task_id: str) -> None:
        path = f"/task-status/stream/{task_id}"
        async with api.stream.stream("GET", path, headers=KEY) as resp:
            first = await EventReader(resp).next(timeout=30)
            assert first is not None and first.data["status"] == "PENDING"
            opened.release()
            await release.wait()

    streams = [asyncio.create_task(follow(t)) for t in task_ids]
    try:
        async with asyncio.timeout(60):
            for _ in task_ids:  # every stream is open, and all were opened at once
                await opened.acquire()
        assert api.runtime.hub.streams == STREAMS
        assert len(r.client_list()) - before <= MOST  # no connection per stream, named or not
        names = api_connections(r)
        assert names.count(HUB_CLIENT_NAME) == 1  # one subscription for all the streams
        assert 1 < len(names) <= MOST, names
    finally:
        release.set()
        async with asyncio.timeout(WAIT_S * 4):
            for task in streams:
                with contextlib.suppress(Exception):
                    await task
