"""reshare: a partition's share changes and its queued items are charged again at once, on both
engines (functions on Redis 7, scripts on 6.2); the hypothesis model test drives it too."""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis

from app.vtrr import FairQueue, Item
from app.vtrr.aio import AsyncFairQueue
from tests.vtrr.helpers import drain, fill, take


def shared(client: redis.Redis, name: str, shares: dict[str, float]) -> FairQueue:
    """A queue whose shares are this dict: a change to it is a change for later enqueues."""
    client.flushdb()
    return FairQueue(client, name, shares=shares)


def test_a_doubled_share_takes_twice_the_turns_from_its_next_item_on(
    engine: tuple[str, redis.Redis],
) -> None:
    name, client = engine
    shares = {"ann": 1.0, "bob": 1.0}
    q = shared(client, f"double-{name}", shares)
    fill(q, "ann", 6)
    fill(q, "bob", 6)
    shares["bob"] = 2.0
    assert q.reshare("bob", 2.0) == 6
    # bob's items start 0, .5, 1, 1.5, 2, 2.5; ann's 0, 1, 2, ...; ties in arrival order
    assert drain(q) == [
        "ann0", "bob0", "bob1", "ann1", "bob2", "bob3", "ann2", "bob4", "bob5",
        "ann3", "ann4", "ann5",
    ]  # fmt: skip


def test_a_smaller_share_sends_the_items_back_and_others_keep_their_order(
    engine: tuple[str, redis.Redis],
) -> None:
    name, client = engine
    shares: dict[str, float] = {}
    q = shared(client, f"half-{name}", shares)
    fill(q, "ann", 3)
    fill(q, "bob", 3)
    fill(q, "cat", 3)
    q.reshare("bob", 0.5)  # bob's items start 0, 2, 4
    assert drain(q) == ["ann0", "bob0", "cat0", "ann1", "cat1", "ann2", "bob1", "cat2", "bob2"]


def test_items_in_flight_or_at_the_front_keep_theirs_and_new_items_follow_the_last(
    engine: tuple[str, redis.Redis],
) -> None:
    name, client = engine
    shares = {"ann": 1.0}
    q = shared(client, f"kept-{name}", shares)
    ids = q.enqueue("ann", [Item(f"a{i}", id=f"a{i}", weight=2) for i in range(4)])
    running = take(q)  # a0, charged 2 at the old share
    assert q.promote("a3")
    shares["ann"] = 4.0
    assert q.reshare("ann", 4.0) == 2  # a1 and a2: the fairly placed ones still queued
    # a1 keeps its start (2); a2 follows at 2 + 2/4; the partition's clock at 3
    assert [q.position(i) for i in ids[1:]] == [1, 2, 0]
    assert client.zscore(q.keys.queue, member_of(client, q, "a2")) == 2.5
    assert float(client.hget(q.keys.partition_virtual_time, "ann") or 0) == 3.0
    q.enqueue("ann", [Item("a4", id="a4", weight=2)])  # charged 2/4 from 3
    assert client.zscore(q.keys.queue, member_of(client, q, "a4")) == 3.0
    assert q.credit(running.task_id, running.token, 1) == 1.0  # half of what it was charged


def member_of(client: redis.Redis, q: FairQueue, task_id: str) -> str:
    raw = client.hget(q.keys.item + task_id, "m")
    assert raw is not None
    return raw.decode() if isinstance(raw, bytes) else raw


def test_an_account_with_nothing_queued_changes_nothing_and_a_bad_share_is_refused(
    engine: tuple[str, redis.Redis],
) -> None:
    name, client = engine
    q = shared(client, f"none-{name}", {})
    fill(q, "ann", 2)
    before = client.zrange(q.keys.queue, 0, -1, withscores=True)
    assert q.reshare("bob", 3.0) == 0
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="share of 'ann' must be"):
            q.reshare("ann", bad)
    assert client.zrange(q.keys.queue, 0, -1, withscores=True) == before


def test_the_asyncio_queue_reshares_as_the_blocking_one(redis_url: str, r: redis.Redis) -> None:
    async def scenario() -> list[str]:
        client = AsyncRedis.from_url(redis_url)
        try:
            shares = {"ann": 1.0, "bob": 1.0}
            q = FairQueue(r, "aio", shares=shares)
            fill(q, "ann", 3)
            fill(q, "bob", 3)
            assert await AsyncFairQueue(client, "aio").reshare("bob", 3.0) == 3
            return drain(q)
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == ["ann0", "bob0", "bob1", "bob2", "ann1", "ann2"]
