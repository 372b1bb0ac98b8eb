"""The event hub: an API process subscribes to a job's channel only while one of its streams
follows that job, and to the moves channel only while it has streams; it subscribes again after
a lost connection, and what was published meanwhile still reaches the stream."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import redis

from app.api.live import events as live_events
from app.store.keys import MOVES, job_channel
from tests.api.conftest import Api
from tests.api.helpers import KEY, WAIT_S, EventReader, Worker
from tests.api.test_stream import submit

pytestmark = pytest.mark.anyio


def listeners(r: redis.Redis, channel: str) -> int:
    """How many connections are subscribed to channel."""
    ((_, count),) = r.pubsub_numsub(channel)
    return int(count)


async def until(check: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    """Poll check until it holds, for at most WAIT_S."""
    async with asyncio.timeout(WAIT_S):
        while True:
            result = check()
            if await result if isinstance(result, Awaitable) else result:
                return
            await asyncio.sleep(0.01)  # polling a condition, with the deadline above


async def test_a_process_hears_a_job_only_while_a_stream_follows_it(
    api: Api, r: redis.Redis
) -> None:
    task_id = await submit(api)
    assert listeners(r, job_channel(task_id)) == 0
    assert listeners(r, MOVES) == 0  # no stream here yet: no queue's moves either

    async with api.stream.stream("GET", f"/task-status/stream/{task_id}", headers=KEY) as resp:
        assert await EventReader(resp).next() is not None
        await until(lambda: listeners(r, job_channel(task_id)) == 1, "the job's subscription")
        await until(lambda: listeners(r, MOVES) == 1, "the moves' subscription")
        other = await submit(api)
        assert listeners(r, job_channel(other)) == 0

    await until(lambda: listeners(r, job_channel(task_id)) == 0, "the job's unsubscription")


async def test_a_waiter_gets_its_event_once_redis_has_confirmed_the_subscription(
    api: Api, r: redis.Redis
) -> None:
    # What a stream reads after this cannot miss a change: its channel is heard already.
    async with api.runtime.hub.subscribe("a-job") as _:
        assert listeners(r, job_channel("a-job")) == 1
        async with api.runtime.hub.subscribe("a-job") as _:  # a second stream of the job
            assert listeners(r, job_channel("a-job")) == 1


@pytest.mark.parametrize("run_when", ["cut", "subscribed again"])
async def test_a_stream_gets_every_change_across_a_cut_subscription(
    api: Api, r: redis.Redis, worker: Worker, run_when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hub's pause before it reconnects (1 s) is not what this test waits to see. The "cut"
    # case keeps a quarter of it, fifty times what the job's run below takes, so that the job's
    # changes land while nobody listens.
    monkeypatch.setattr(live_events, "RETRY_S", 0.25 if run_when == "cut" else 0.05)
    task_id = await submit(api)
    async with api.stream.stream("GET", f"/task-status/stream/{task_id}", headers=KEY) as resp:
        events = EventReader(resp)
        first = await events.next()
        assert first is not None and first.data["status"] == "PENDING"
        assert listeners(r, job_channel(task_id)) == 1  # confirmed before the first event

        r.client_kill_filter(_type="pubsub")  # the hub's connection, cut
        if run_when == "cut":
            assert listeners(r, job_channel(task_id)) == 0  # its changes published to nobody
        else:
            await until(lambda: listeners(r, job_channel(task_id)) == 1, "the job's channel again")
        await asyncio.to_thread(worker.run, task_id)

        started, done = await events.next(), await events.next()
        assert started is not None and started.data["status"] == "STARTED"
        assert done is not None and done.data["status"] == "SUCCESS"
        assert await events.next() is None
