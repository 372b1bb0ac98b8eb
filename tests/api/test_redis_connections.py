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
    refused: list[str] = []

    async def follow(task_id: str) -> None:
        path = f"/task-status/stream/{task_id}"
        while not release.is_set():
            async with api.stream.stream("GET", path, headers=KEY) as resp:
                if resp.status_code == 503:
                    # The 200 opens at once queue for the pool's connections, each for at most
                    # POOL_WAIT_S: on a busy machine the last of them wait longer and are
                    # refused with a 503 and Retry-After, and a client opens its stream again.
                    refused.append(task_id)
                    continue
                assert resp.status_code == 200, await resp.aread()
                first = await EventReader(resp).next(timeout=30)
                assert first is not None and first.data["status"] == "PENDING"
                opened.release()
                await release.wait()
                return

    async def all_open() -> None:
        for _ in task_ids:
            await opened.acquire()

    streams = [asyncio.create_task(follow(t)) for t in task_ids]
    waiting = asyncio.create_task(all_open())
    try:
        # A stream ends only once released: one that ends before is a failure, told at once.
        await asyncio.wait([waiting, *streams], timeout=60, return_when=asyncio.FIRST_COMPLETED)
        for task in streams:
            if task.done():
                task.result()
        assert waiting.done(), f"{len(refused)} refusals and not every stream open within 60 s"
        assert api.runtime.hub.streams == STREAMS
        assert len(r.client_list()) - before <= MOST  # no connection per stream, named or not
        names = api_connections(r)
        assert names.count(HUB_CLIENT_NAME) == 1  # one subscription for all the streams
        assert 1 < len(names) <= MOST, names
    finally:
        waiting.cancel()
        release.set()
        async with asyncio.timeout(WAIT_S * 4):
            for task in streams:
                with contextlib.suppress(Exception):
                    await task
